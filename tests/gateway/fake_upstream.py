"""A small OpenAI-compatible upstream on 127.0.0.1 that records what it receives.

Written on raw asyncio streams rather than a web framework so that it can misbehave
on purpose (hang, drop the connection mid-request), which a framework hides.

The behaviour is chosen by the upstream model name the gateway sends, so concurrent
tests never race on shared state:

* ``mode-429``: 429 with ``Retry-After: 7`` and an OpenAI rate-limit error body
* ``mode-500``: 500 with an OpenAI server error body
* ``mode-hang``: never answers (until the client gives up)
* ``mode-close``: closes the connection without answering
* ``mode-midstream``: for ``stream=True``, sends one chunk and then drops the connection
* ``mode-422``: 422 with a FastAPI ``{"detail": [...]}`` body, as a FastAPI server rejects a bad role
* ``mode-400``, ``mode-404``: that status with an OpenAI ``invalid_request_error`` body
* ``mode-status-NNN``: status NNN with an OpenAI error body (503: with ``Retry-After: 3``);
  ``mode-text-NNN``: status NNN with a plain-text body (a proxy's error page);
  ``mode-context-400``: llama.cpp's 400 for a prompt longer than its window
* ``mode-leak-500``: a plain-text 500 quoting operator data (``LEAK_TEXT``: a private base URL,
  a Groq key, a model file's path), as a self-hosted server's error page may; ``mode-leak-json``: the
  same text (and the model's name, upper-cased) in an OpenAI error body; ``mode-leak-midstream``: the
  same error object as an event after the first chunk (vLLM's ``data: {"error": ...}``), then
  ``[DONE]``, and a JSON 500 when not streamed; ``mode-leak-textstream``: the same, the error an
  ``event: error`` with the text as its data
* ``mode-usage-<kind>``: ``/responses/compact`` answers 200 with a ``usage`` the metrics cannot read
  (``na``: ``"n/a"``; ``string``: a string ``cached_tokens``; ``negative``: a negative iteration)
* a model named ``ft:...``: OpenAI's 404 for a model that does not exist, naming it
* ``mode-openai-401``: OpenAI's real 401 for a wrong key (it quotes the key's first and last characters)
* ``mode-llama-invalid``: the 500 that llama_cpp.server sends for a request it cannot validate
* ``mode-slowstream``: for ``stream=True``, a chunk every 100 ms for a minute; the time the client
  closed the connection is kept in ``Recorded.closed_at``
* ``mode-stall``: the same, but silent for a minute after the first chunk
* ``mode-needle...``: an LLM that reads: answers the body field ``needle`` when it occurs in the
  messages it received, else "unanswerable" when they carry the Self-Route instruction, else a
  wrong guess; streamed in pieces of 5 characters so a word spans chunks
* ``mode-think``: thinks first (``reasoning_content``, as llama.cpp and vLLM send it), then answers
* ``mode-cached``: a canned completion whose usage says 8 of its 10 prompt tokens came from the
  provider's prompt cache (``prompt_tokens_details.cached_tokens``; in the last chunk when streamed
  with ``stream_options.include_usage``)
* ``mode-tool``: calls the request's first tool with ``TOOL_ARGUMENTS`` (streamed: name, then
  the arguments in two pieces), with ``finish_reason: tool_calls``
* anything else: a canned completion; ``stream=True`` gets SSE chunks and ``data: [DONE]``

``/responses`` (the Responses API, for the gateway's Responses relay) answers with ``RESPONSE``, or
streamed with ``response_events`` (named events, an unknown one among them, as OpenAI sends them);
``mode-midstream`` drops the connection after the first events; ``mode-error-event`` sends the first
events and then an ``error`` event whose message quotes operator data (``LEAK_TEXT``).

``/embeddings`` answers every input with a small vector (base64 when asked), and ``/completions``
(legacy text completions) with the canned text, streamed or not; the modes above apply to both.

A request whose last message is the MixPR router prompt is answered with ``n``.
Like a real server, a body that is not a chat request (no list of messages with known roles)
gets a FastAPI-style 422 instead of an answer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

ROUTER_MARKER = "If the query asks for summarization"
REPLY_TEXT = "Hello from the fake upstream."
SELF_ROUTE_MARKER = "If the question cannot be answered based on the provided text"
GUESS_TEXT = "It is probably in the part I did not see."
TOOL_ARGUMENTS = '{"query": "lighthouse vault"}'
TOOL_CALL_ID = "call_fake_1"
REASONING_TEXT = "The user greets me. I greet back."


@dataclass
class Recorded:
    """One request as the upstream saw it."""

    method: str
    path: str
    headers: dict[str, str]
    raw_body: bytes
    closed_at: float | None = None  # time.monotonic() when the client went away mid-stream

    @property
    def json(self) -> Any:
        return json.loads(self.raw_body)

    @property
    def is_router_call(self) -> bool:
        messages = self.json.get("messages") or [{}]
        return ROUTER_MARKER in str(messages[-1].get("content", ""))


@dataclass
class FakeUpstream:
    """Start with :meth:`start` (runs its own event loop in a thread); ``base_url`` ends in ``/v1``."""

    requests: list[Recorded] = field(default_factory=list)
    port: int = 0
    tls: ssl.SSLContext | None = None  # serve https with this server context
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.base_events.Server | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeUpstream:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True, name="fake-upstream")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake upstream did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def received(self, model: str | None = None) -> list[Recorded]:
        """Recorded chat requests, optionally only those for upstream ``model``."""
        with self._lock:
            found = list(self.requests)
        return [r for r in found if model is None or r.json.get("model") == model]

    # -- server ---------------------------------------------------------------------------------

    def _run(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle_connection, "127.0.0.1", 0, ssl=self.tls)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    async def _handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                with self._lock:
                    self.requests.append(request)
                keep_open = await self._respond(request, reader, writer)
                if not keep_open:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client left, or the server is stopping (a hanging request is cancelled)
        finally:
            writer.close()

    async def _respond(self, request: Recorded, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> bool:
        if request.path.endswith("/models"):
            _write_json(writer, 200, {"object": "list", "data": []})
            return True
        body = request.json
        mode = str(body.get("model", ""))
        problems = _invalid_chat(body) if request.path.endswith("/chat/completions") else []
        if problems or mode == "mode-422":
            detail = problems or [{"type": "literal_error", "loc": ["body", "messages", 0, "role"],
                                   "msg": "Input should be 'user'", "input": "wizard"}]
            _write_json(writer, 422, {"detail": detail})
            return True
        if mode.startswith(("mode-status-", "mode-text-")):  # any status; an OpenAI error, or plain text
            status = int(mode[-3:])
            if mode.startswith("mode-text-"):
                _write_raw(writer, status, b"upstream error page", "text/plain")
                return True
            error = {"message": f"Upstream status {status}.", "type": "upstream_error", "param": None,
                     "code": f"status_{status}"}
            _write_json(writer, status, {"error": error}, {"Retry-After": "3"} if status == 503 else None)
            return True
        if mode == "mode-leak-500":
            _write_raw(writer, 500, LEAK_TEXT.encode(), "text/plain")
            return True
        key = request.headers.get("authorization", "")[7:]  # quoted back, as OpenAI's 401 quotes it
        if mode in ("mode-leak-midstream", "mode-leak-textstream") and body.get("stream"):
            error = leak_error(mode, key)
            event = (b"event: error\ndata: " + error["message"].encode() if mode == "mode-leak-textstream"
                     else b"data: " + json.dumps({"error": error}).encode()) + b"\n\n"
            await _write_leak_stream(writer, mode, event, text=not request.path.endswith("/chat/completions"))
            return True
        if mode in ("mode-leak-json", "mode-leak-midstream", "mode-leak-textstream"):
            _write_json(writer, 500, {"error": leak_error(mode, key)})
            return True
        if mode.startswith("mode-usage-") and request.path.endswith("/responses/compact"):
            _write_json(writer, 200, {**COMPACTED, "usage": ODD_USAGE[mode[len("mode-usage-"):]]})
            return True
        if mode.startswith("ft:"):  # OpenAI's own 404, which names the model it was sent
            error = {"message": f"The model `{mode}` does not exist or you do not have access to it.",
                     "type": "invalid_request_error", "param": None, "code": "model_not_found"}
            _write_json(writer, 404, {"error": error})
            return True
        if mode == "mode-openai-401":  # OpenAI's own answer to a wrong key, which quotes part of it
            _write_json(writer, 401, {"error": OPENAI_401})
            return True
        if mode == "mode-context-400":  # llama.cpp's own refusal of a prompt over its window
            error = {"code": 400, "type": "exceed_context_size_error", "message": "request (36365 tokens) "
                     "exceeds the available context size (8192 tokens), try increasing it"}
            _write_json(writer, 400, {"error": error})
            return True
        if mode in ("mode-400", "mode-404"):
            status = int(mode[-3:])
            error = {"message": f"The upstream refused this request ({status}).",
                     "type": "invalid_request_error", "param": "messages", "code": f"upstream_{status}"}
            _write_json(writer, status, {"error": error})
            return True
        if mode == "mode-llama-invalid":  # llama_cpp.server reports its own validation errors so
            _write_json(writer, 500, {"error": LLAMA_VALIDATION_500})
            return True
        if mode in ("mode-slowstream", "mode-stall") and body.get("stream"):
            every = 0.1 if mode == "mode-slowstream" else 60.0
            await _write_slow_stream(request, reader, writer, mode, every=every)
            return False
        if mode == "mode-hang":
            await asyncio.sleep(3600)
        if mode == "mode-close":
            return False
        if mode == "mode-429":
            error = {"message": "Rate limit reached", "type": "rate_limit_error", "param": None,
                     "code": "rate_limit_exceeded"}
            _write_json(writer, 429, {"error": error}, {"Retry-After": "7"})
            return True
        if mode == "mode-500":
            error = {"message": "The upstream broke", "type": "server_error", "param": None, "code": None}
            _write_json(writer, 500, {"error": error})
            return True
        if request.path.endswith("/embeddings"):
            _write_json(writer, 200, _embeddings(mode, body))
            return True
        if request.path.endswith("/responses/compact"):
            _write_json(writer, 200, COMPACTED)
            return True
        if request.path.endswith("/responses"):
            return await _write_responses(writer, mode, body)
        if request.path.endswith("/completions") and not request.path.endswith("/chat/completions"):
            return await _write_text_completion(writer, mode, bool(body.get("stream")))
        if mode == "mode-tool" and body.get("tools"):
            name = body["tools"][0]["function"]["name"]
            if body.get("stream"):
                await _write_tool_stream(writer, mode, name)
            else:
                _write_json(writer, 200, _tool_completion(mode, name))
            return True
        text = "n" if request.is_router_call else REPLY_TEXT
        if mode.startswith("mode-needle") and not request.is_router_call:
            text = _needle_reply(body)
        reasoning = REASONING_TEXT if mode == "mode-think" else None
        if body.get("stream"):
            usage = _usage(mode) if (body.get("stream_options") or {}).get("include_usage") else None
            await _write_stream(writer, mode, text, drop_midway=mode == "mode-midstream",
                                piece_chars=5 if mode.startswith("mode-needle") else 0, reasoning=reasoning,
                                usage=usage)
            return mode != "mode-midstream"
        completion = _completion(mode, text)
        if reasoning:
            completion["choices"][0]["message"]["reasoning_content"] = reasoning
        _write_json(writer, 200, completion)
        return True


async def _read_request(reader: asyncio.StreamReader) -> Recorded | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed its idle keep-alive connection
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Recorded(method=method, path=path, headers=headers, raw_body=body)


# OpenAI's answer to POST /v1/responses/compact, as its API reference shows it.
COMPACTED = {
    "id": "resp_001", "object": "response.compaction", "created_at": 1764967971,
    "output": [
        {"id": "msg_000", "type": "message", "status": "completed", "role": "user",
         "content": [{"type": "input_text", "text": "Create a simple landing page for a dog petting cafe."}]},
        {"id": "cmp_001", "type": "compaction", "encrypted_content": "gAAAAABpM0Yj-...="},
    ],
    "usage": {"input_tokens": 139, "input_tokens_details": {"cached_tokens": 128}, "output_tokens": 438,
              "output_tokens_details": {"reasoning_tokens": 64}, "total_tokens": 577},
}


# A Responses object as OpenAI's API reference shows one, with a compaction item it made (server-side
# compaction) and the usage that includes it.
RESPONSE = {
    "id": "resp_fake", "object": "response", "created_at": 1764967971, "status": "completed",
    "model": "echo", "error": None, "incomplete_details": None,
    "output": [
        {"id": "cmp_002", "type": "compaction", "encrypted_content": "gAAAAABpM0Yj-compacted-in-turn="},
        {"id": "msg_fake", "type": "message", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": REPLY_TEXT}]},
    ],
    "usage": {"input_tokens": 2139, "input_tokens_details": {"cached_tokens": 2048}, "output_tokens": 438,
              "output_tokens_details": {"reasoning_tokens": 64}, "total_tokens": 2577},
}


def response_events(model: str) -> list[bytes]:
    """The streamed answer: OpenAI's events for ``RESPONSE``, one of a type no API has yet among them."""
    message = RESPONSE["output"][1]
    started = {**RESPONSE, "model": model, "status": "in_progress", "output": [], "usage": None}
    kinds: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": started}), ("response.in_progress", {"response": started}),
        ("response.output_item.added", {"output_index": 0, "item": {**message, "status": "in_progress",
                                                                    "content": []}}),
        ("response.future_event", {"detail": {"kept": True}}),
        ("response.content_part.added", {"item_id": "msg_fake", "output_index": 0, "content_index": 0,
                                         "part": {**message["content"][0], "text": ""}}),
        ("response.output_text.delta", {"item_id": "msg_fake", "output_index": 0, "content_index": 0,
                                        "delta": REPLY_TEXT[:5], "logprobs": []}),
        ("response.output_text.delta", {"item_id": "msg_fake", "output_index": 0, "content_index": 0,
                                        "delta": REPLY_TEXT[5:], "logprobs": []}),
        ("response.output_text.done", {"item_id": "msg_fake", "output_index": 0, "content_index": 0,
                                       "text": REPLY_TEXT, "logprobs": []}),
        ("response.content_part.done", {"item_id": "msg_fake", "output_index": 0, "content_index": 0,
                                        "part": message["content"][0]}),
        ("response.output_item.done", {"output_index": 0, "item": message}),
        ("response.completed", {"response": {**RESPONSE, "model": model}}),
    ]
    return [f"event: {kind}\ndata: ".encode() + json.dumps({"type": kind, "sequence_number": n, **fields},
                                                           separators=(",", ":")).encode() + b"\n\n"
            for n, (kind, fields) in enumerate(kinds)]


async def _write_responses(writer: asyncio.StreamWriter, model: str, body: dict[str, Any]) -> bool:
    if not body.get("stream"):
        _write_json(writer, 200, {**RESPONSE, "model": model})
        return True
    writer.write(_head(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}))
    events = response_events(model)
    if model == "mode-error-event":
        error = {"type": "error", "sequence_number": 2, "code": "server_error", "message": LEAK_TEXT,
                 "param": None}
        events = [*events[:2], b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n"]
    for piece in events[:2] if model == "mode-midstream" else events:
        writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        await writer.drain()
    if model == "mode-midstream":
        writer.transport.abort()
        return False
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


LLAMA_VALIDATION_500 = {
    "message": "1 validation error:\n  {'type': 'list_type', 'loc': ('body', 'messages', 0, "
               "'ChatCompletionRequestUserMessage', 'content'), 'msg': 'Input should be a valid list', "
               "'input': 5}\n\n  File \"/site-packages/llama_cpp/server/app.py\", line 376, in "
               "create_chat_completion\n    POST /v1/chat/completions",
    "type": "internal_server_error", "param": None, "code": None,
}
LEAK_BASE = "http://10.2.3.4:8000/v1"
LEAK_KEY = "gsk_" + "Q7w" * 16  # a Groq-shaped key
LEAK_PATH = "/srv/models/acme-internal-7b.Q4_K_M.gguf"
LEAK_TEXT = (f"upstream {LEAK_BASE} failed: worker with key {LEAK_KEY} could not load {LEAK_PATH} "
             "(also tried https://ops:hunter2@mirror.internal:8443/v1, token hf_" + "x" * 34 + ")")
ODD_USAGE: dict[str, Any] = {
    "na": "n/a", "string": {"input_tokens": 9, "input_tokens_details": {"cached_tokens": "n/a"}},
    "negative": {"input_tokens": 9, "iterations": [{"type": "compaction", "cache_read_input_tokens": -5}]},
}


def leak_error(model: str, key: str = "") -> dict[str, Any]:
    """An OpenAI error object quoting ``LEAK_TEXT``, the upstream model's name, upper-cased, and the
    key it was sent."""
    return {"message": f"{LEAK_TEXT} serving {model.upper()} for key {key}", "type": "server_error",
            "param": None, "code": None}


async def _write_leak_stream(writer: asyncio.StreamWriter, model: str, event: bytes, *, text: bool) -> None:
    """A first chunk (a text completion's, or a chat one), then the error ``event``, then [DONE]."""
    writer.write(_head(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}))
    first = _chunk(model, {"role": "assistant", "content": "Hel"}, None)
    if text:
        choice = {"index": 0, "text": "Hel", "logprobs": None, "finish_reason": None}
        chunk = {"id": "cmpl-fake", "object": "text_completion", "created": 1, "model": model,
                 "choices": [choice]}
        first = b"data: " + json.dumps(chunk).encode() + b"\n\n"
    for piece in (first, event, b"data: [DONE]\n\n"):
        writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()


OPENAI_401 = {
    "message": "Incorrect API key provided: sk-proj-********************************************wxyz. You "
               "can find your API key at https://platform.openai.com/account/api-keys.",
    "type": "invalid_request_error", "param": None, "code": "invalid_api_key",
}
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def _invalid_chat(body: Any) -> list[dict[str, Any]]:
    """FastAPI-style validation errors for a body no chat server would accept."""
    if not isinstance(body, dict):
        return [{"type": "dict_type", "loc": ["body"], "msg": "Input should be a valid dictionary"}]
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [{"type": "list_type", "loc": ["body", "messages"], "msg": "Input should be a valid list"}]
    return [{"type": "literal_error", "loc": ["body", "messages", i, "role"],
             "msg": f"Input should be one of {', '.join(ROLES)}", "input": str(m)[:50]}
            for i, m in enumerate(messages) if not isinstance(m, dict) or m.get("role") not in ROLES]


def _needle_reply(body: dict[str, Any]) -> str:
    needle = str(body.get("needle") or "")
    prompt = json.dumps(body.get("messages"), ensure_ascii=False)
    if needle and json.dumps(needle, ensure_ascii=False)[1:-1] in prompt:
        return needle
    return "unanswerable" if SELF_ROUTE_MARKER in prompt else GUESS_TEXT


CACHED_TOKENS = 8


def _usage(model: str) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if model == "mode-cached":
        usage["prompt_tokens_details"] = {"cached_tokens": CACHED_TOKENS}
    return usage


def _completion(model: str, text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": _usage(model),
    }


def _embeddings(model: str, body: dict[str, Any]) -> dict[str, Any]:
    inputs = body.get("input")
    inputs = inputs if isinstance(inputs, list) and not isinstance(inputs[0], int) else [inputs]
    data = []
    for index, text in enumerate(inputs):
        vector = [float(len(str(text))), float(index), 0.5]
        encoded: Any = vector
        if body.get("encoding_format") == "base64":
            encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": 3, "total_tokens": 3}}


async def _write_text_completion(writer: asyncio.StreamWriter, model: str, stream: bool) -> bool:
    def choice(text: str, finish: str | None) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    def completion(choices: list[dict[str, Any]]) -> dict[str, Any]:
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        return {"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()), "model": model,
                "choices": choices, "usage": usage}

    if not stream:
        _write_json(writer, 200, completion([choice(REPLY_TEXT, "stop")]))
        return True
    writer.write(_head(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}))
    words = REPLY_TEXT.split(" ")
    events = [completion([choice(w if i == 0 else " " + w, None)]) for i, w in enumerate(words)]
    events.append(completion([choice("", "stop")]))
    pieces = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
    for piece in pieces:
        writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


def _tool_completion(model: str, name: str) -> dict[str, Any]:
    call = {"id": TOOL_CALL_ID, "type": "function", "function": {"name": name, "arguments": TOOL_ARGUMENTS}}
    completion = _completion(model, "")
    completion["choices"][0].update(message={"role": "assistant", "content": None, "tool_calls": [call]},
                                    finish_reason="tool_calls")
    return completion


async def _write_tool_stream(writer: asyncio.StreamWriter, model: str, name: str) -> None:
    writer.write(_head(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}))
    half = len(TOOL_ARGUMENTS) // 2
    start = {"index": 0, "id": TOOL_CALL_ID, "type": "function", "function": {"name": name, "arguments": ""}}
    pieces = [_chunk(model, {"role": "assistant", "content": None, "tool_calls": [start]}, None)]
    for part in (TOOL_ARGUMENTS[:half], TOOL_ARGUMENTS[half:]):
        pieces.append(_chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}, None))
    pieces += [_chunk(model, {}, "tool_calls"), b"data: [DONE]\n\n"]
    for piece in pieces:
        writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _chunk(model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
             "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _write_raw(writer: asyncio.StreamWriter, status: int, data: bytes, content_type: str) -> None:
    writer.write(_head(status, {"Content-Type": content_type, "Content-Length": str(len(data))}) + data)


def _write_json(
    writer: asyncio.StreamWriter, status: int, payload: Any, extra: dict[str, str] | None = None
) -> None:
    data = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(data)), **(extra or {})}
    writer.write(_head(status, headers) + data)


async def _write_stream(
    writer: asyncio.StreamWriter, model: str, text: str, *, drop_midway: bool, piece_chars: int = 0,
    reasoning: str | None = None, usage: dict[str, Any] | None = None,
) -> None:
    headers = {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}
    writer.write(_head(200, headers))
    pieces = [_chunk(model, {"role": "assistant", "content": ""}, None)]
    if reasoning:
        middle = len(reasoning) // 2
        pieces += [_chunk(model, {"reasoning_content": part}, None)
                   for part in (reasoning[:middle], reasoning[middle:])]
    pieces += [_chunk(model, {"content": word}, None) for word in text.split(" ")[:1] if drop_midway]
    if not drop_midway:
        words = text.split(" ")
        parts = [w if i == 0 else " " + w for i, w in enumerate(words)]
        if piece_chars:
            parts = [text[i : i + piece_chars] for i in range(0, len(text), piece_chars)]
        pieces += [_chunk(model, {"content": part}, None) for part in parts]
        pieces.append(_chunk(model, {}, "stop"))
        if usage is not None:  # OpenAI's last chunk: no choices, the usage
            pieces.append(b"data: " + json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                                                  "created": int(time.time()), "model": model, "choices": [],
                                                  "usage": usage}).encode() + b"\n\n")
        pieces.append(b"data: [DONE]\n\n")
    for piece in pieces:
        writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        await writer.drain()
    if drop_midway:
        writer.transport.abort()
        return
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _write_slow_stream(request: Recorded, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter, model: str, every: float) -> None:
    """A chunk ``every`` seconds for a minute, noting when the client hangs up."""
    writer.write(_head(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}))
    hung_up = asyncio.ensure_future(reader.read(1))  # b"" (EOF) once the client closes
    try:
        for i in range(int(60 / every)):
            piece = _chunk(model, {"content": f"word{i} "}, None)
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
            await asyncio.wait([hung_up], timeout=every)
            if hung_up.done() or writer.is_closing():
                break
    except ConnectionError:
        pass
    finally:
        request.closed_at = time.monotonic()
        hung_up.cancel()


def _head(status: int, headers: dict[str, str]) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 422: "Unprocessable Entity",
              429: "Too Many Requests", 500: "Internal Server Error"}.get(status, "Status")
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
