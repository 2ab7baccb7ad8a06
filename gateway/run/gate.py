"""A budget of units (requests, bytes) taken without waiting, shared by the edge's body-bytes limit
and the compression queue: refused at once (503 + Retry-After) instead of queueing without end."""

from __future__ import annotations

from gateway.errors import Overloaded

RETRY_AFTER_S = 1  # load moves in seconds: most compressions take well under one


class Gate:
    """A budget of units (requests, bytes) taken without waiting: refused when it would go over."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def try_take(self, units: int) -> bool:
        if self.used + units > self.limit:
            return False
        self.used += units
        return True

    def give_back(self, units: int) -> None:
        self.used -= units


def queue_full() -> Overloaded:
    return Overloaded(
        "Too many long prompts are waiting for compression (general_settings.max_queued_compressions); "
        "retry shortly.",
        retry_after=RETRY_AFTER_S,
    )
