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
* ``mode-think``: thinks first (``reasoning_content``, as llama.cpp and vLLM send it), then answers
* ``mode-tool``: calls the request's first tool with ``TOOL_ARGUMENTS`` (streamed: name, then
  the arguments in two pieces), with ``finish_reason: tool_calls``
* anything else: a canned completion; ``stream=True`` gets SSE chunks and ``data: [DONE]``

``/embeddings`` answers every input with a small vector (base64 when asked), and ``/completions``
(legacy text completions) with the canned text, streamed or not; the modes above apply to both.

A request whose last message is the MixPR router prompt is answered with ``n``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

ROUTER_MARKER = "If the query asks for summarization"
REPLY_TEXT = "Hello from the fake upstream."
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
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.base_events.Server | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

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
            asyncio.start_server(self._handle_connection, "127.0.0.1", 0)
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
                keep_open = await self._respond(request, writer)
                if not keep_open:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client left, or the server is stopping (a hanging request is cancelled)
        finally:
            writer.close()

    async def _respond(self, request: Recorded, writer: asyncio.StreamWriter) -> bool:
        if request.path.endswith("/models"):
            _write_json(writer, 200, {"object": "list", "data": []})
            return True
        body = request.json
        mode = str(body.get("model", ""))
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
        reasoning = REASONING_TEXT if mode == "mode-think" else None
        if body.get("stream"):
            await _write_stream(writer, mode, text, drop_midway=mode == "mode-midstream", reasoning=reasoning)
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


def _completion(model: str, text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
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


def _write_json(
    writer: asyncio.StreamWriter, status: int, payload: Any, extra: dict[str, str] | None = None
) -> None:
    data = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(data)), **(extra or {})}
    writer.write(_head(status, headers) + data)


async def _write_stream(
    writer: asyncio.StreamWriter, model: str, text: str, *, drop_midway: bool, reasoning: str | None = None
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
        pieces += [_chunk(model, {"content": w if i == 0 else " " + w}, None) for i, w in enumerate(words)]
        pieces += [_chunk(model, {}, "stop"), b"data: [DONE]\n\n"]
    for piece in pieces:
        writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        await writer.drain()
    if drop_midway:
        writer.transport.abort()
        return
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _head(status: int, headers: dict[str, str]) -> bytes:
    reason = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error"}.get(status, "Status")
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
