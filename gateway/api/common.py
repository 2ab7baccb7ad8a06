"""What every API shares at the HTTP edge: the app's state, auth, the JSON body, mixpr switches."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

from fastapi import Request
from starlette.responses import StreamingResponse

from gateway.compress.policy import is_int_at_least, parse_control  # noqa: F401  (the adapters read them here)
from gateway.edge.body import read_json
from gateway.errors import GatewayError, Unauthorized
from gateway.run import offload
from gateway.upstream import http

log = logging.getLogger("gateway.api.common")

T = TypeVar("T")
# Proxies must neither cache nor buffer a stream of server-sent events.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def state(request: Request) -> Any:
    """The ``GatewayState`` the app was built with."""
    return request.app.state.gateway


def authorize(request: Request) -> None:
    """Bearer (or ``api-key``, or Anthropic's ``x-api-key``) must equal ``master_key`` when one is set."""
    key = state(request).config.general_settings.master_key
    if not key:
        return
    header = request.headers.get("authorization", "")
    given = header[7:].strip() if header[:7].lower() == "bearer " else (
        request.headers.get("api-key") or request.headers.get("x-api-key", ""))
    if not given:
        raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
    if not secrets.compare_digest(given.encode(), key.encode()):
        raise Unauthorized("Incorrect API key provided.")


async def authorized_body(request: Request) -> tuple[Any, Any]:
    """Every API's first step: the app's state, the key checked, the JSON body read within limits."""
    gateway = state(request)
    authorize(request)
    return gateway, await read_json(request, gateway.config.general_settings)


async def parsed(parse: Callable[[Any, Any], T], body: Any, headers: Mapping[str, str]) -> T:
    """``parse(body, headers)``, the API's validation and translation of the request: per-part work,
    so done in a worker thread for a body of many messages or parts (``gateway.run.offload``)."""
    return await offload.inline_or_run(offload.is_big(body), parse, body, headers)


def event_stream(body: Any, headers: Mapping[str, str], *, upstream: Any = None) -> StreamingResponse:
    """A server-sent-event response of ``body`` (an async iterator of encoded events) that closes
    ``body`` and the ``upstream`` stream it reads (a ``gateway.upstream.sse.Events``) however it ends."""
    return ClosingStream(body, upstream, media_type="text/event-stream", headers={**headers, **SSE_HEADERS})


class ClosingStream(StreamingResponse):
    """A streamed response that closes what it streams when it ends, even unread: when the client
    leaves before the first event, Starlette cancels the response before it ever reads its body, and
    a generator never started cannot run its ``finally`` (the upstream would generate, and bill,
    until the garbage collector found it)."""

    def __init__(self, body: Any, upstream: Any, **kwargs: Any) -> None:
        super().__init__(body, **kwargs)
        self.upstream = upstream

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await http.closed(self.body_iterator)
            await http.closed(self.upstream)


async def relayed_events(events: Any, error_event: Callable[[GatewayError], bytes]) -> AsyncIterator[bytes]:
    """A raw relay's whole events (``events``: an ``sse.Events`` with ``ended_well``); a failure
    midway, or an end before the answer's last event, becomes the API's in-band error event
    (``error_event``), after the last whole event, never inside one."""
    error: GatewayError | None = None
    try:
        async for block in events:
            yield block
    except GatewayError as failed:
        error = failed
    if error is None and not events.ended_well:
        error = GatewayError("The upstream stream ended before its answer did.", status_code=502,
                             code="upstream_connection_error")
    if error is not None:
        log.warning("upstream stream failed after start: %s %s", error.status_code, error.code)
        yield error_event(error)
