"""A second recording upstream for the plug-in tests, with what ``fake_upstream`` does not speak.

* ``POST .../v1/messages``: Anthropic's Messages API; records the body exactly as received and
  answers one text block, so a test sees every block the proxy forwarded to an Anthropic model;
* ``POST .../chat/completions`` and ``.../embeddings`` for a model named ``flaky-<anything>``: 429
  twice (with ``retry-after: 0``), then a canned completion or embedding; the count is per model.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "Scripted reply."


class ScriptedUpstream:
    def __init__(self) -> None:
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self.attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ScriptedUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def received(self, model: str) -> list[dict[str, Any]]:
        with self._lock:
            return [body for path, body in self.bodies if body.get("model") == model]

    def clear(self) -> None:
        with self._lock:
            self.bodies.clear()
            self.attempts.clear()

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        model = str(body.get("model"))
        with self._lock:
            self.bodies.append((path, body))
            self.attempts[model] = attempt = self.attempts.get(model, 0) + 1
        if path.endswith("/messages"):
            return 200, {"id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
                         "content": [{"type": "text", "text": REPLY}], "stop_reason": "end_turn",
                         "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 2}}
        if model.startswith("flaky-") and attempt <= 2:
            return 429, {"error": {"message": "Rate limit reached, retry.", "type": "rate_limit_error",
                                   "param": None, "code": "rate_limit_exceeded"}}
        if path.endswith("/embeddings"):
            return 200, {"object": "list", "model": model, "usage": {"prompt_tokens": 1, "total_tokens": 1},
                         "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}]}
        return 200, {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": model,
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": REPLY}}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}


def _handler(upstream: ScriptedUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            status, answer = upstream.answer(self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if status == 429:
                self.send_header("retry-after", "0")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            return None

    return Handler
