"""Work a request leaves for after its response: run once the last byte was handed to the server.

A pure ASGI middleware (:class:`AfterResponse`, installed by the app) gives each HTTP request a list;
:func:`defer` appends to it, and the middleware calls what it holds when the app returns, i.e. after
the response (streamed or not, or an error) was sent, or the client left. Outside such a request
(the LiteLLM plug-in, a test calling the core directly) :func:`defer` calls at once. Callbacks must
be quick and never raise: they hand work to a background task (``gateway.core.shadow``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

log = logging.getLogger("gateway.core.after_response")

_pending: ContextVar[list[Callable[[], None]] | None] = ContextVar("mixpr_after_response", default=None)


def defer(callback: Callable[[], None]) -> None:
    """Call ``callback`` after this request's response is sent (at once outside a request)."""
    pending = _pending.get()
    if pending is None:
        callback()
    else:
        pending.append(callback)


class AfterResponse:
    """Runs what a request deferred once the app has sent its response (pure ASGI: streams stay streams)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pending: list[Callable[[], None]] = []
        token = _pending.set(pending)
        try:
            await self.app(scope, receive, send)
        finally:
            _pending.reset(token)
            for callback in pending:
                try:
                    callback()
                except Exception:  # a bug here must not turn a sent response into an error
                    log.exception("deferred work failed")
