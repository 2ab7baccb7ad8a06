"""The last stop for exceptions nothing else handled (bugs): counted, logged in one line, answered 500.

A pure ASGI middleware inside ``MetricsMiddleware``, so the 500 it sends is counted with the others,
and outside every other middleware, so their bugs are caught too. Starlette's own last resort
(``ServerErrorMiddleware``) always re-raises, and uvicorn then logs the whole traceback, whose
frames and message can quote the request; here the exception ends, and its traceback is logged
only at debug level (``--log-level debug`` or ``MIXPR_LOG_LEVEL=debug``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, MutableMapping
from typing import Any

from prometheus_client import Counter
from starlette.responses import Response

from gateway.metrics import ASGIApp, Message, path_label

log = logging.getLogger("gateway.edge.unexpected")

Scope = MutableMapping[str, Any]
# A client's request id is logged only when it cannot forge or garble a log line.
_PLAIN_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


class UnexpectedErrors:
    """Turns an exception escaping the app into a 500 (``respond(path)``), or, once the response
    has started, into a cut connection, so a client never takes a truncated stream for a whole one."""

    def __init__(self, app: ASGIApp, counter: Counter, respond: Callable[[str], Response]) -> None:
        self.app = app
        self.counter = counter
        self.respond = respond

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent: list[str] = []  # how far the response got: "" (nothing), "started", "sent"

        async def send_and_watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent.append("started")
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                sent.append("sent")
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        except Exception as exc:
            self._report(scope, exc, sent[-1] if sent else "")
            if not sent:
                await self.respond(scope["path"])(scope, receive, send)
            # else: return, the body unfinished or not; the server closes an unfinished one

    def _report(self, scope: Scope, exc: Exception, sent: str) -> None:
        path = path_label(scope["path"])
        self.counter.labels(path).inc()
        when = {"started": " after the response started; the connection is cut",
                "sent": " after the response was sent"}.get(sent, "")
        # The type and where, never str(exc): messages can quote the prompt.
        log.error("unexpected error %s on %s%s%s", type(exc).__name__, path, when, request_id(scope))
        log.debug("traceback of the unexpected error", exc_info=exc)


def request_id(scope: Scope) -> str:
    """`` (request id X)`` for a plain ``x-request-id`` header (as load balancers add), else ``""``."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id" and _PLAIN_ID.fullmatch(value):
            return f" (request id {value.decode()})"
    return ""
