"""A scripted Anthropic Messages upstream on 127.0.0.1 that records what it receives.

It plays an agent that reads files: while fewer than ``len(files)`` of its own ``Read`` calls have
a ``tool_result`` in the conversation, it answers with the next ``Read`` call (``tool_use``,
``stop_reason: tool_use``); then with :data:`FINAL_TEXT` followed by every file code (``CODE-<n>-...``)
it can still see in the request. A request without tools (a client's title or quota probe) gets a
short text. ``stream: true`` gets Anthropic's server-sent events as Claude Code parses them:
``message_start``, one ``content_block_*`` run per block, ``message_delta`` and ``message_stop``.

``POST /v1/messages/count_tokens`` answers a rough count (characters / 4); a model named
``status-<code>`` gets that status with Anthropic's error body and ``retry-after: 7``. ``leak-text``,
``leak-json``, ``leak-midstream`` and ``leak-textstream`` quote the operator's data
(``fake_upstream.LEAK_TEXT`` and their own name, upper-cased): a plain-text 500; Anthropic's error
body, a 500; and, streamed, an ``event: error`` after ``message_start``, its data Anthropic's error
object or the plain text (a 529 error body when not streamed).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http import server as http_server
from typing import Any

from fake_upstream import LEAK_TEXT

FINAL_TEXT = "All files read."
SHORT_TEXT = "Noted."
READ_ID = "toolu_read_"
CODE = re.compile(r"CODE-\d+-[a-z]+")
# Server-side compaction (``context_management`` with a compact edit), as Anthropic answers it: the
# summary as a ``compaction`` block first, and what each sampling iteration billed in
# ``usage.iterations`` (the top-level figures are the last iteration's alone).
COMPACTION_BLOCK = {"type": "compaction", "content": "Summary: the user asked for the lighthouse code; "
                    "files f0 to f3 were read.", "signature": "sig-compaction-1"}
COMPACTED_USAGE = {
    "input_tokens": 2300, "output_tokens": 100, "cache_read_input_tokens": 1000,
    "cache_creation_input_tokens": 0,
    "iterations": [
        {"type": "compaction", "input_tokens": 18000, "output_tokens": 350, "cache_read_input_tokens": 16000,
         "cache_creation_input_tokens": 500},
        {"type": "message", "input_tokens": 2300, "output_tokens": 100, "cache_read_input_tokens": 1000,
         "cache_creation_input_tokens": 0},
    ],
}


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    raw_body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw_body)


@dataclass
class FakeAnthropic:
    files: list[str] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list)

    def start(self) -> FakeAnthropic:
        fake = self

        class Handler(http_server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                fake.requests.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, raw))
                body = json.loads(raw or b"{}")
                if self.path.split("?")[0].endswith("/count_tokens"):
                    return self._json(200, {"input_tokens": len(raw) // 4})
                if not self.path.split("?")[0].endswith("/v1/messages"):
                    return self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                                        "message": self.path}})
                model = str(body.get("model", ""))
                if model.startswith("status-"):  # Anthropic's error body, with Retry-After
                    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "Slow down."}}
                    return self._json(int(model[7:]), error, {"retry-after": "7"})
                if model.startswith("leak-"):
                    return self._leak(model, bool(body.get("stream")), self.headers.get("x-api-key", ""))
                blocks, stop = fake.answer(body)
                message = _message(body.get("model", "fake"), blocks, stop, len(raw) // 4)
                if model.startswith("compacting"):  # compacted first (context_management), then answered
                    message = {**message, "content": [COMPACTION_BLOCK, *blocks], "usage": COMPACTED_USAGE}
                if body.get("stream"):
                    return self._stream(message)
                return self._json(200, message)

            def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _leak(self, model: str, stream: bool, key: str) -> None:
                text = f"{LEAK_TEXT} serving {model.upper()} for key {key}"
                error = {"type": "error", "error": {"type": "api_error", "message": text}}
                if model == "leak-text":
                    return self._raw(500, text.encode(), "text/plain")
                if model == "leak-json" or not stream:
                    return self._json(500 if model == "leak-json" else 529, error)
                start = _events(_message(model, [], "end_turn", 1))[0]
                events = [("message_start", json.dumps(start)),
                          ("error", text if model == "leak-textstream" else json.dumps(error))]
                data = "".join(f"event: {kind}\ndata: {e}\n\n" for kind, e in events).encode()
                return self._raw(200, data, "text/event-stream")

            def _raw(self, status: int, data: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in _events(message):
                    self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http_server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        # shutdown() waits for serve_forever's next poll: 0.5 s by default.
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def loop_requests(self) -> list[Seen]:
        """The agent loop's requests (those with tools), in order."""
        return [r for r in self.requests
                if r.path.split("?")[0].endswith("/v1/messages") and r.json.get("tools")]

    def answer(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        if not body.get("tools"):
            return [{"type": "text", "text": SHORT_TEXT}], "end_turn"
        done = _answered_reads(body.get("messages") or [])
        if done < len(self.files):
            call = {"type": "tool_use", "id": f"{READ_ID}{done}", "name": "Read",
                    "input": {"file_path": self.files[done]}}
            return [{"type": "text", "text": f"Reading file {done + 1}."}, call], "tool_use"
        codes = sorted(set(CODE.findall(json.dumps(body.get("messages")))))
        return [{"type": "text", "text": " ".join([FINAL_TEXT, *codes])}], "end_turn"


def _answered_reads(messages: list[Any]) -> int:
    found = set()
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result" and \
                    str(block.get("tool_use_id", "")).startswith(READ_ID):
                found.add(block["tool_use_id"])
    return len(found)


def _message(model: str, blocks: list[dict[str, Any]], stop: str, input_tokens: int) -> dict[str, Any]:
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": blocks,
            "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 10}}


def _events(message: dict[str, Any]) -> list[dict[str, Any]]:
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "text", "text": ""}})
            text = block["text"]
            for piece in (text[: len(text) // 2], text[len(text) // 2:]):
                events.append({"type": "content_block_delta", "index": index,
                               "delta": {"type": "text_delta", "text": piece}})
        else:
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {**block, "input": {}}})
            events.append({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        events.append({"type": "content_block_stop", "index": index})
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append({"type": "message_delta", "delta": delta,
                   "usage": {"output_tokens": message["usage"]["output_tokens"]}})
    events.append({"type": "message_stop"})
    return events
