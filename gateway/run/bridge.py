"""A request's place in the compression queue (``Ticket``), and pool jobs from a planning thread
(``Bridge``): the thread hands its batches to the loop, which submits them, and waits for them.

A request takes its place at its first pool job, or is refused at once (503 + Retry-After); whoever
makes a ticket releases it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

from gateway.run.gate import Gate, queue_full
from gateway.run.workers import JobFailed, Workers

log = logging.getLogger("gateway.run.bridge")


class Ticket:
    """One request's place in the compression queue: taken at its first pool job, or refused.
    Whoever makes one releases it."""

    def __init__(self, queue: Gate, workers: Workers, on_shed: Callable[[], Any] | None = None) -> None:
        self._queue = queue
        self._workers = workers
        self._on_shed = on_shed
        self._admitted = False
        self._released = False

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._released:  # a batch a cancelled build had scheduled: its place was given back
            raise RuntimeError("the request this job was for has ended")
        if not self._admitted:
            if not self._queue.try_take(1):
                if self._on_shed is not None:
                    self._on_shed()
                raise queue_full()
            self._admitted = True
        return await self._workers.run(fn, *args, **kwargs)

    def release(self) -> None:
        self._released = True
        if self._admitted:
            self._queue.give_back(1)
            self._admitted = False


class Bridge:
    """Pool jobs from the planning thread: submitted on the loop, waited for in the thread.

    Jobs go in batches of at most ``BATCH_JOBS``, at most one batch per worker at a time, so a batch
    stays well within the pool's per-job timeout however long the conversation, other requests'
    jobs take turns with a long build, and a build whose request ended stops submitting. A job that
    raises, or a batch the pool could not run (a timeout, a crash), fails only its own jobs: their
    results are None, and the caller keeps what it had for them."""

    BATCH_JOBS = 8

    def __init__(self, loop: asyncio.AbstractEventLoop, ticket: Ticket, workers: int) -> None:
        self.loop = loop
        self.ticket = ticket
        self.workers = workers
        self.closed = False
        self.failed = 0  # jobs that failed, over every map

    def map(self, job: Any, jobs: list[tuple[Any, ...]],
            done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """``job(*args)`` for every args of ``jobs`` (None where it failed); ``done(index, result)``
        as each result arrives, so what is finished is kept if a later batch fails."""
        out: list[Any] = [None] * len(jobs)
        size = self.BATCH_JOBS
        batches = [list(range(start, min(start + size, len(jobs)))) for start in range(0, len(jobs), size)]
        running: dict[concurrent.futures.Future[list[Any]], list[int]] = {}
        while batches or running:
            while batches and len(running) < max(1, self.workers):
                if self.closed:
                    raise RuntimeError("the request this build was for has ended")
                numbers = batches.pop(0)
                work = self.ticket.run(batch_job, job, [jobs[n] for n in numbers])
                running[asyncio.run_coroutine_threadsafe(work, self.loop)] = numbers
            finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                self._collect(future, running.pop(future), out, done)
        return out

    def _collect(self, future: concurrent.futures.Future[list[Any]], numbers: list[int], out: list[Any],
                 done: Callable[[int, Any], None] | None) -> None:
        try:
            results = future.result()
        except JobFailed as exc:
            log.warning("a batch of %d pool jobs failed (%s); they keep what they had", len(numbers),
                        exc.cause)
            results = [None] * len(numbers)
        for number, result in zip(numbers, results, strict=True):
            out[number] = result
            if result is None:
                self.failed += 1
            elif done is not None:
                done(number, result)


def batch_job(job: Any, batch: list[tuple[Any, ...]]) -> list[Any]:
    """In a worker: ``job`` on each of a batch of arguments; None for one that raised."""
    out = []
    for args in batch:
        try:
            out.append(job(*args))
        except Exception as exc:  # one odd text must not cost the others their forms
            log.warning("a pool job raised %s; its text keeps what it had", type(exc).__name__)
            out.append(None)
    return out
