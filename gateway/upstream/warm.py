"""LiteLLM's first call, made before any request needs it (issue 59).

Importing LiteLLM loads most of it, but its first call imports more on the way (its proxy's types for
the prompt templates, its logging's service types, the provider lookups, the HTTP transport) and builds
more on the way back (the OpenAI client's response models, its logging and cost of an answer): 0.1 to
0.5 s that the first request after readiness paid, in the gateway and in every compression worker that
asks the auto router. One call to a server on a loopback port, which answers every completion at once,
goes the whole way there and back; the server is gone before this returns.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading

ANSWER = json.dumps({
    "id": "warm-up", "object": "chat.completion", "created": 0, "model": "warm-up",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "y"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}).encode()


SERVING = "warm-up answer"  # the server thread's name


class _Answer(http.server.BaseHTTPRequestHandler):
    """Answers any POST with ``ANSWER``."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args: object) -> None:  # nothing of the warm-up in the gateway's log
        return None


def first_call() -> None:
    """One completion, answered on a loopback port: LiteLLM's lazy imports and the response's models
    made now, on the way out and back; every failure ignored. No thread is left running (the compression
    pool's fork server calls this before it forks)."""
    import litellm

    quiet = litellm.suppress_debug_info
    litellm.suppress_debug_info = True  # LiteLLM prints a help banner with every failure otherwise
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    # Polled every 10 ms: shutdown() waits for the next poll (0.5 s by default, 0.2 s more to readiness).
    serving = threading.Thread(target=server.serve_forever, args=(0.01,), name=SERVING, daemon=True)
    serving.start()
    try:
        with contextlib.suppress(Exception):
            litellm.completion(model="openai/warm-up", api_base=f"http://127.0.0.1:{server.server_port}/v1",
                               api_key="warm-up", timeout=1, max_retries=0,
                               messages=[{"role": "user", "content": "y"}])
    finally:
        litellm.suppress_debug_info = quiet
        server.shutdown()
        server.server_close()
        serving.join()
