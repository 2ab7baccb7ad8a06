"""A scripted upstream that serves the Responses API (``POST /v1/responses``) on 127.0.0.1 and plays
an agent reading files, as OpenAI's own API would answer Codex: for the gateway's Responses relay.

While fewer than ``len(files)`` of its own calls (``call_id`` ``call_read_<n>``) have an output in
the input, it calls the client's shell tool (a ``function`` tool named as in ``fake_chat_agent.SHELLS``)
to ``cat`` the next file; then it answers :data:`FINAL` and every ``CODE-<n>-...`` it can still see.
Every answer carries a reasoning item with ``encrypted_content`` (what ``store: false`` clients must
send back), and the first one also a ``compaction`` item (OpenAI's server-side compaction): both
opaque, so a client that keeps them sends them back as they came. A request with a
``compaction_trigger`` item (a client compacting remotely) gets one ``compaction`` item instead; the
first answer's usage can be set (``first_usage``) past a client's limit, so that it compacts.
Streamed (named events, as OpenAI sends them: ``response.created``, each item's ``added`` / ``done``,
``response.completed`` with the usage) or not, as asked; every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import time
from http import server as http_server
from typing import Any

from fake_chat_agent import CALL_ID, CODE, FINAL, SHELLS, serve, stop

USAGE = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
         "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 15}
COMPACTION = {"id": "cmp_agent", "type": "compaction", "encrypted_content": "gAAAAB-agent-compaction-0=="}
# What a request ending in a ``compaction_trigger`` item gets (Codex's remote compaction, v2): one
# ``compaction`` item, which the client sends on in place of the history it summarises.
REMOTE_COMPACTION = {"id": "cmp_remote", "type": "compaction",
                     "encrypted_content": "gAAAAB-agent-remote-compaction=="}


def reasoning(n: int) -> dict[str, Any]:
    """The reasoning item of answer ``n``: its summary, and its encrypted content."""
    return {"id": f"rs_agent_{n}", "type": "reasoning", "summary": [{"type": "summary_text",
                                                                      "text": f"Reading file {n}."}],
            "encrypted_content": f"gAAAAB-agent-reasoning-{n}=="}


class FakeResponsesAgent:
    def __init__(self, files: list[str], *, first_usage: int = USAGE["total_tokens"]) -> None:
        self.files = files
        self.requests: list[dict[str, Any]] = []
        self.compactions: list[dict[str, Any]] = []  # the requests that asked to compact
        self.answers = 0
        self.first_usage = first_usage  # the first answer's total_tokens: past a client's limit, it compacts

    def start(self) -> FakeResponsesAgent:
        fake = self

        class Handler(http_server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                if not self.path.endswith("/responses"):
                    return self._send(404, {"error": {"message": f"no {self.path}", "type": "not_found"}})
                fake.requests.append(body)
                response = fake.answer(body)
                if not body.get("stream"):
                    return self._send(200, response)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in _events(response):
                    self.wfile.write(event)
                self.close_connection = True

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server, self.url = serve(Handler)
        return self

    def stop(self) -> None:
        stop(self.server)

    def loop_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("tools")]

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        n = self.answers
        self.answers += 1
        items = [reasoning(n), *([COMPACTION] if n == 0 else []), self._next(body)]
        kinds = {i.get("type") for i in body.get("input") or [] if isinstance(i, dict)}
        if "compaction_trigger" in kinds:
            self.compactions.append(body)
            items = [REMOTE_COMPACTION]
        usage = USAGE if n else {**USAGE, "input_tokens": self.first_usage, "total_tokens": self.first_usage}
        return {"id": f"resp_agent_{n}", "object": "response", "created_at": int(time.time()),
                "status": "completed", "model": body.get("model"), "output": items, "usage": usage}

    def _next(self, body: dict[str, Any]) -> dict[str, Any]:
        """The next call, or the final message."""
        tools = [t.get("name") for t in body.get("tools") or [] if t.get("type") == "function"]
        items = [i for i in body.get("input") or [] if isinstance(i, dict)]
        done = {i.get("call_id") for i in items if i.get("type") == "function_call_output"
                and str(i.get("call_id", "")).startswith(CALL_ID)}
        shell = next((t for t in tools if t in SHELLS), None)
        if shell and len(done) < len(self.files):
            n = len(done)
            return {"id": f"fc_read_{n}", "type": "function_call", "status": "completed",
                    "call_id": f"{CALL_ID}{n}", "name": shell,
                    "arguments": json.dumps(SHELLS[shell](self.files[n]))}
        codes = sorted(set(CODE.findall(json.dumps(items))))
        text = " ".join([FINAL, *codes])
        return {"id": "msg_agent", "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _events(response: dict[str, Any]) -> list[bytes]:
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    kinds: list[tuple[str, dict[str, Any]]] = [("response.created", {"response": started}),
                                               ("response.in_progress", {"response": started})]
    for index, item in enumerate(response["output"]):
        kinds += [("response.output_item.added", {"output_index": index, "item": item}),
                  ("response.output_item.done", {"output_index": index, "item": item})]
    kinds.append(("response.completed", {"response": response}))
    return [f"event: {kind}\ndata: ".encode() + json.dumps({"type": kind, "sequence_number": n, **fields})
            .encode() + b"\n\n" for n, (kind, fields) in enumerate(kinds)]
