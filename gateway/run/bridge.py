"""A request's place in the compression queue (``Ticket``), and pool jobs from a planning thread
(``Bridge``): the thread hands its batches to the loop, which submits them, and waits for them.

A request takes its place at its first pool job, or is refused at once (503 + Retry-After); whoever
makes a ticket releases it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gateway.run.gate import Gate, queue_full
from gateway.run.workers import Workers


class Ticket:
    """One request's place in the compression queue: taken at its first pool job, or refused.
    Whoever makes one releases it."""

    def __init__(self, queue: Gate, workers: Workers, on_shed: Callable[[], Any] | None = None) -> None:
        self._queue = queue
        self._workers = workers
        self._on_shed = on_shed
        self._admitted = False

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._admitted:
            if not self._queue.try_take(1):
                if self._on_shed is not None:
                    self._on_shed()
                raise queue_full()
            self._admitted = True
        return await self._workers.run(fn, *args, **kwargs)

    def release(self) -> None:
        if self._admitted:
            self._queue.give_back(1)
            self._admitted = False


class Bridge:
    """Pool jobs from the planning thread: submitted on the loop, waited for in the thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ticket: Ticket, workers: int) -> None:
        self.loop = loop
        self.ticket = ticket
        self.workers = workers
        self.closed = False

    def map(self, job: Any, jobs: list[tuple[Any, ...]]) -> list[tuple[str, int]]:
        """``job(*args)`` for every args of ``jobs``, in one batch per worker."""
        if self.closed:
            raise RuntimeError("the request this build was for has ended")
        size = max(1, self.workers)
        batches = [jobs[i::size] for i in range(min(size, len(jobs)))]

        async def run_all() -> list[list[tuple[str, int]]]:
            return await asyncio.gather(*(self.ticket.run(batch_job, job, batch) for batch in batches))

        done = asyncio.run_coroutine_threadsafe(run_all(), self.loop).result()
        out: list[tuple[str, int]] = [("", 0)] * len(jobs)
        for start, results in enumerate(done):
            for offset, result in enumerate(results):
                out[start + offset * size] = result
        return out


def batch_job(job: Any, batch: list[tuple[Any, ...]]) -> list[tuple[str, int]]:
    """In a worker: ``job`` on each of a batch of arguments."""
    return [job(*args) for args in batch]
