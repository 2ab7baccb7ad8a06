"""A request's place in the compression queue, and pool jobs handed over from a planning thread."""

from __future__ import annotations

import asyncio

import pytest

from gateway.run.bridge import Ticket
from gateway.run.gate import Gate
from gateway.run.workers import Workers


def _double(x: int) -> int:
    return 2 * x


def test_a_job_scheduled_after_its_request_ended_takes_no_place_in_the_queue() -> None:
    """A build cancelled while its next pool batch is already scheduled on the loop: the request's
    ``finally`` released the ticket first. Ten such races must not fill a gate of two."""

    async def main() -> tuple[int, int]:
        workers = Workers(workers=1, executor="thread")
        await workers.start(lambda: None)
        gate = Gate(2)
        for _ in range(10):
            ticket = Ticket(gate, workers)
            ticket.release()  # the request ended (its client left) ...
            with pytest.raises(RuntimeError):
                await ticket.run(_double, 1)  # ... and then its scheduled batch runs
        live = Ticket(gate, workers)
        answer = await live.run(_double, 21)  # another request still gets a place
        live.release()
        workers.close()
        return gate.used, answer

    assert asyncio.run(main()) == (0, 42)
