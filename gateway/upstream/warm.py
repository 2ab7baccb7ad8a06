"""LiteLLM's first call, made before any request needs it (issue 59).

Importing LiteLLM loads most of it, but its first call imports more on the way (its proxy's types for
the prompt templates, its logging's service types, the provider lookups, the HTTP transport): 0.1 to
0.5 s that the first request after readiness paid, in the gateway and in every compression worker that
asks the auto router. One call to a closed loopback port goes the whole way to the socket and fails
there at once, silently; one that LiteLLM answers itself goes the way back.
"""

from __future__ import annotations

import contextlib

CLOSED = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, the connection is refused at once


def first_call() -> None:
    """One completion to ``CLOSED`` and one LiteLLM answers itself (``mock_response``): LiteLLM's
    lazy imports made now, on the way out and back; every failure ignored."""
    import litellm

    quiet = litellm.suppress_debug_info
    litellm.suppress_debug_info = True  # LiteLLM prints a help banner with every failure otherwise
    call = {"model": "openai/warm-up", "api_base": CLOSED, "api_key": "warm-up", "timeout": 1,
            "max_retries": 0, "messages": [{"role": "user", "content": "y"}]}
    try:
        with contextlib.suppress(Exception):
            litellm.completion(**call)
        with contextlib.suppress(Exception):  # and an answer's way back (its logging), with no call at all
            litellm.completion(**call, mock_response="y")
    finally:
        litellm.suppress_debug_info = quiet
