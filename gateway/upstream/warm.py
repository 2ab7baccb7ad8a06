"""LiteLLM's first calls, made before any request needs them (issue 59).

Importing LiteLLM loads most of it, but its first call imports more on the way (its proxy's types for
the prompt templates, its logging's service types, the provider lookups, the HTTP transport) and builds
more on the way back (the OpenAI client's response models, its logging and cost of an answer): 0.1 to
0.5 s that the first request after readiness paid, in the gateway and in every compression worker that
asks the auto router. Calls to a server on a loopback port, which answers every completion at once, go
the whole way there and back; the server is gone before they return.

Who calls what: the gateway ``first_call`` in a thread, then ``first_async_call`` on its loop (it
forwards with ``acompletion``) with its configured models; the compression pool's fork server
``first_call`` before it forks (``gateway.compress.preload_router``), and each worker again after, with
the router's models (a forked worker copies each page the call touches, 8 to 10 ms the first time).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import http.server
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

ANSWER = json.dumps({
    "id": "warm-up", "object": "chat.completion", "created": 0, "model": "warm-up",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "y"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}).encode()


SERVING = "warm-up answer"  # the server thread's name
# One model in LiteLLM's price map and one not: an answer's cost takes another way for each, and the
# first priced answer alone costs 6 ms more than the next (the requests' models are mostly priced).
MODELS = ("openai/gpt-4o-mini", "openai/warm-up")
MAX_OWN = 16  # of the configured models: a few milliseconds each, before readiness


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


@contextlib.contextmanager
def _answering() -> Iterator[str]:
    """The ``api_base`` of a loopback server that answers every completion with ``ANSWER``; the server
    is shut down and its thread joined on exit, LiteLLM's help banner kept quiet meanwhile."""
    import litellm

    quiet = litellm.suppress_debug_info
    litellm.suppress_debug_info = True  # LiteLLM prints a help banner with every failure otherwise
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    # Polled every 10 ms: shutdown() waits for the next poll (0.5 s by default, 0.2 s more to readiness).
    serving = threading.Thread(target=server.serve_forever, args=(0.01,), name=SERVING, daemon=True)
    serving.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        litellm.suppress_debug_info = quiet
        server.shutdown()
        server.server_close()
        serving.join()


def _call(base: str, model: str) -> dict[str, Any]:
    return {"model": model, "api_base": base, "api_key": "warm-up", "timeout": 1, "max_retries": 0,
            "messages": [{"role": "user", "content": "y"}]}


def first_call(models: Sequence[str] = ()) -> None:
    """One completion per model of ``MODELS`` and of ``models`` (``warmed``), answered on a loopback
    port: LiteLLM's lazy imports and the response's models made now, on the way out and back; every
    failure ignored. No thread is left running (the compression pool's fork server calls this before
    it forks)."""
    import litellm

    with _unlogged(), _answering() as base:
        for model in warmed(models):
            with contextlib.suppress(Exception):
                litellm.completion(**_call(base, model))


async def first_async_call(models: Sequence[str] = ()) -> None:
    """``first_call`` for ``litellm.acompletion``, the way the gateway forwards: its async client, and
    its async logging, are others (3 to 4 ms more on the first request). On the caller's loop, whose
    client the requests then use; the server's start and stop in a thread."""
    import litellm

    answering = _answering()
    base = await asyncio.to_thread(answering.__enter__)
    try:
        with _unlogged():  # in this task only: requests served meanwhile are logged as ever
            for model in warmed(models):
                with contextlib.suppress(Exception):
                    await litellm.acompletion(**_call(base, model))
    finally:
        await asyncio.to_thread(answering.__exit__, None, None, None)


class _WarmUpRecords(logging.Filter):
    """Drops the LiteLLM logger's records of the warm-up's own calls ("LiteLLM completion() model=
    warm-up"): an operator reading the start's log would look for requests nobody sent."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _WARMING.get()


_WARMING: contextvars.ContextVar[bool] = contextvars.ContextVar("mixpr_warming_up", default=False)
_FILTER = _WarmUpRecords()


@contextlib.contextmanager
def _unlogged() -> Iterator[None]:
    """LiteLLM's records unlogged in this thread or task, while inside."""
    logging.getLogger("LiteLLM").addFilter(_FILTER)  # once: a logger holds a filter once
    token = _WARMING.set(True)
    try:
        yield
    finally:
        _WARMING.reset(token)


def warmed(models: Sequence[str]) -> list[str]:
    """``MODELS``, then the first ``MAX_OWN`` of ``models`` that LiteLLM sends as OpenAI chat
    completions (a model's own lookups, its price or the lack of one, cost its first request 1 to 3 ms).
    Another provider's way out may look for credentials first (a cloud's metadata server, seconds
    away), and would not take the loopback's answer anyway."""
    import litellm

    own = []
    for model in dict.fromkeys(models):
        try:
            provider = litellm.get_llm_provider(model)[1]
        except Exception:  # an unknown provider: nothing to warm
            continue
        if provider == "openai" and model not in MODELS and len(own) < MAX_OWN:
            own.append(model)
    return [*MODELS, *own]
