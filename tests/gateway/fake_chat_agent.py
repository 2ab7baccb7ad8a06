"""A scripted OpenAI chat upstream on 127.0.0.1 that plays an agent reading files (for Codex, OpenCode
and Qwen Code).

While fewer than ``len(files)`` of its own calls (ids ``call_read_<n>``) have a tool message in the
conversation, it calls the client's shell tool (``exec_command``, ``shell``, ``shell_command``; OpenCode's
``bash``; Qwen Code's ``run_shell_command``) to ``cat`` the next file; then it answers :data:`FINAL`
and every ``CODE-<n>-...`` it can still see.
Streamed (chat chunks, usage last) or not, as asked; every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http import server as http_server
from typing import Any

CALL_ID = "call_read_"
FINAL = "All files read."
CODE = re.compile(r"CODE-\d+-[a-z]+")
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
SHELLS = {"exec_command": lambda path: {"cmd": f"cat {path}"},
          "shell": lambda path: {"command": ["cat", path]},
          "shell_command": lambda path: {"command": f"cat {path}"},
          "bash": lambda path: {"command": f"cat {path}", "description": "Print the file"},  # OpenCode
          "run_shell_command": lambda path: {"command": f"cat {path}",  # Qwen Code
                                             "description": "Print the file"}}


class FakeChatAgent:
    def __init__(self, files: list[str]) -> None:
        self.files = files
        self.requests: list[dict[str, Any]] = []

    def start(self) -> FakeChatAgent:
        fake = self

        class Handler(http_server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                fake.requests.append(body)
                delta, finish = fake.answer(body)
                if body.get("stream"):
                    return self._stream(body.get("model"), delta, finish)
                message = {"role": "assistant", "content": delta.get("content")}
                if "tool_calls" in delta:
                    message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"}
                                             for c in delta["tool_calls"]]
                choice = {"index": 0, "message": message, "finish_reason": finish}
                data = json.dumps({**_head(body.get("model"), "chat.completion"), "choices": [choice],
                                   "usage": USAGE}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, model: str | None, delta: dict[str, Any], finish: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                head = _head(model, "chat.completion.chunk")
                chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", **delta},
                                                "finish_reason": None}]},
                          {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                          {**head, "choices": [], "usage": USAGE}]
                for chunk in chunks:
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.server, self.url = serve(Handler)
        return self

    def stop(self) -> None:
        stop(self.server)

    def loop_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("tools")]

    def answer(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        tools = [t["function"]["name"] for t in body.get("tools") or [] if t.get("type") == "function"]
        done = {m.get("tool_call_id") for m in body.get("messages", [])
                if m.get("role") == "tool" and str(m.get("tool_call_id", "")).startswith(CALL_ID)}
        shell = next((t for t in tools if t in SHELLS), None)
        if shell and len(done) < len(self.files):
            n = len(done)
            call = {"index": 0, "id": f"{CALL_ID}{n}", "type": "function",
                    "function": {"name": shell, "arguments": json.dumps(SHELLS[shell](self.files[n]))}}
            return {"content": None, "tool_calls": [call]}, "tool_calls"
        codes = sorted(set(CODE.findall(json.dumps(body.get("messages")))))
        return {"content": " ".join([FINAL, *codes])}, "stop"


def serve(handler: type[http_server.BaseHTTPRequestHandler]) -> tuple[http_server.ThreadingHTTPServer, str]:
    """A threaded server of ``handler`` on a free 127.0.0.1 port, running, and its ``/v1`` base URL."""
    server = http_server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def stop(server: http_server.ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


def _head(model: str | None, kind: str) -> dict[str, Any]:
    return {"id": "chatcmpl-agent", "object": kind, "created": int(time.time()), "model": model}
