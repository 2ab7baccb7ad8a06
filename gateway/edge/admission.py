"""Admission control: refuse work the gateway cannot hold, at once, instead of queueing it without end.

Two limits, each a :class:`Gate` that a request passes without waiting or is refused (503 +
Retry-After, ``code: overloaded``): the bytes of request bodies held in memory at once (taken
while the body is read, given back when the response has been sent) and the requests using the
compression pool (taken at a request's first pool job, given back when its compression is done).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from gateway.errors import Overloaded
from gateway.run.gate import RETRY_AFTER_S, Gate

HELD_BODY_BYTES = "mixpr.body_bytes"  # scope key: this request's share of the body-bytes gate


class HeldBytes:
    """One request's reservation of body bytes; the middleware gives it back when the request ends."""

    def __init__(self, gate: Gate, on_shed: Callable[[], None]) -> None:
        self.gate = gate
        self.held = 0
        self._on_shed = on_shed

    def take(self, size: int) -> None:
        if not self.gate.try_take(size):
            self._on_shed()
            raise Overloaded(
                "The gateway is holding as many request bodies as it can "
                "(general_settings.max_inflight_body_bytes); retry shortly.",
                retry_after=RETRY_AFTER_S,
            )
        self.held += size

    def release(self) -> None:
        self.gate.give_back(self.held)
        self.held = 0


def held_bytes(scope: MutableMapping[str, Any]) -> HeldBytes | None:
    return scope.get(HELD_BODY_BYTES)


class BodyBytesMiddleware:
    """Gives each HTTP request a :class:`HeldBytes`, released after its response (streams included)."""

    def __init__(self, app: Callable[..., Awaitable[None]], gate: Gate, on_shed: Callable[[], None]) -> None:
        self.app = app
        self.gate = gate
        self.on_shed = on_shed

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held = scope[HELD_BODY_BYTES] = HeldBytes(self.gate, self.on_shed)
        try:
            await self.app(scope, receive, send)
        finally:
            held.release()
