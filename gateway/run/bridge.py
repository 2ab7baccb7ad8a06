"""A request's place in the compression queue (``Ticket``), and pool jobs from a planning thread
(``Bridge``): the thread hands its batches to the loop, which submits them, and waits for them.

A request takes its place at its first pool job, or is refused at once (503 + Retry-After); whoever
makes a ticket releases it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
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
    jobs take turns with a long build, and a build whose request ended stops submitting.

    A job fails alone. One that raises fails in its batch, which goes on. A batch the pool gave up
    on (it ran past the timeout, or crashed its worker) is run again job by job, so the one job
    that did it fails and its batch-mates get their results. Failed jobs' results are None, and the
    caller keeps what it had for them."""

    BATCH_JOBS = 8

    def __init__(self, loop: asyncio.AbstractEventLoop, ticket: Ticket, workers: int) -> None:
        self.loop = loop
        self.ticket = ticket
        self.workers = workers
        self.closed = False

    def map(self, job: Any, jobs: list[tuple[Any, ...]], done: Callable[[int, Any], None] | None = None,
            failed: Callable[[int, str], None] | None = None) -> list[Any]:
        """``job(*args)`` for every args of ``jobs`` (None where it failed); ``done(index, result)``
        as each result arrives, so what is finished is kept if a later batch fails;
        ``failed(index, cause)`` for a job that failed on its own: it raised ("raised"), or it ran
        past the timeout or crashed its worker running alone ("timeout", "crash"). A pool with no
        worker to run anything ("unavailable") says nothing of the jobs: ``failed`` is not called."""
        out: list[Any] = [None] * len(jobs)
        size = self.BATCH_JOBS
        batches = deque(list(range(start, min(start + size, len(jobs))))
                        for start in range(0, len(jobs), size))
        running: dict[concurrent.futures.Future[list[Any]], list[int]] = {}
        while batches or running:
            while batches and len(running) < max(1, self.workers):
                if self.closed:
                    raise RuntimeError("the request this build was for has ended")
                numbers = batches.popleft()
                work = self.ticket.run(batch_job, job, [jobs[n] for n in numbers])
                running[asyncio.run_coroutine_threadsafe(work, self.loop)] = numbers
            finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                again = self._collect(future, running.pop(future), out, done, failed)
                batches.extendleft([number] for number in reversed(again))  # before any new batch
        return out

    def _collect(self, future: concurrent.futures.Future[list[Any]], numbers: list[int], out: list[Any],
                 done: Callable[[int, Any], None] | None,
                 failed: Callable[[int, str], None] | None) -> list[int]:
        """Store a batch's results; the jobs to run again, each alone (a batch the pool gave up on)."""
        try:
            results: list[Any] = future.result()
        except JobFailed as exc:
            if len(numbers) > 1 and exc.cause != "unavailable":
                log.warning("a batch of %d pool jobs failed (%s); running each alone", len(numbers),
                            exc.cause)
                return numbers
            log.warning("a pool job failed (%s); its text keeps what it had", exc.cause)
            results = [Failure(exc.cause)] * len(numbers)
        for number, result in zip(numbers, results, strict=True):
            if isinstance(result, Failure):
                if failed is not None and result.cause != "unavailable":
                    failed(number, result.cause)
            else:
                out[number] = result
                if done is not None:
                    done(number, result)
        return []


@dataclass(frozen=True)
class Failure:
    """What a job that failed gave instead of its result: why ("raised", "timeout", "crash",
    "unavailable")."""

    cause: str


def batch_job(job: Any, batch: list[tuple[Any, ...]]) -> list[Any]:
    """In a worker: ``job`` on each of a batch of arguments; a :class:`Failure` for one that raised."""
    out: list[Any] = []
    for args in batch:
        try:
            out.append(job(*args))
        except Exception as exc:  # one odd text must not cost the others their forms
            log.warning("a pool job raised %s; its text keeps what it had", type(exc).__name__)
            out.append(Failure("raised"))
    return out
