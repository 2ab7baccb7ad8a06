"""A request's place in the compression queue, and pool jobs handed over from a planning thread."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway.run.bridge import Bridge, Ticket
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


# -- Bridge.map: batching and failures ----------------------------------------------------------------

SLOW = 3  # the job that runs past the pool's timeout
FAILING = 5  # the job that raises


class _Recording(Workers):
    """Thread workers that note the size of every batch they run, and how many ran at once."""

    def __init__(self, **options: Any) -> None:
        super().__init__(executor="thread", **options)
        self.batches: list[int] = []
        self.running = self.most = 0

    async def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.batches.append(len(args[1]))  # batch_job(job, batch)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            return await super().run(fn, *args, **kwargs)
        finally:
            self.running -= 1


def _job(x: int) -> int:
    if x == FAILING:
        raise ValueError("a pathological text")
    if x == SLOW:
        time.sleep(1.5)  # past the pool's timeout: the thread worker is given up on
    return 2 * x


def _map(jobs: list[int], *, workers: int = 2, timeout_s: float = 30
         ) -> tuple[list[Any], dict[int, Any], list[tuple[int, str]], _Recording]:
    """``Bridge.map(_job, ...)`` from a planning thread: its results, what ``done`` and ``failed`` saw."""

    async def main() -> tuple[list[Any], dict[int, Any], list[tuple[int, str]], _Recording]:
        pool = _Recording(workers=workers, timeout_s=timeout_s)
        await pool.start(lambda: None)
        gate = Gate(4)
        ticket = Ticket(gate, pool)
        bridge = Bridge(asyncio.get_running_loop(), ticket, workers)
        done: dict[int, Any] = {}
        failed: list[tuple[int, str]] = []
        try:
            out = await asyncio.to_thread(bridge.map, _job, [(x,) for x in jobs], done.__setitem__,
                                          lambda index, cause: failed.append((index, cause)))
        finally:
            ticket.release()
            pool.close()
        assert gate.used == 0
        return out, done, failed, pool

    return asyncio.run(main())


def test_map_runs_jobs_in_batches_of_eight_one_per_worker_at_a_time() -> None:
    out, done, failed, pool = _map(list(range(20)), workers=2)
    assert out == [None if x == FAILING else 2 * x for x in range(20)]
    assert sorted(pool.batches) == [4, 8, 8] and pool.most <= 2
    assert failed == [(FAILING, "raised")]
    assert done == {i: 2 * i for i in range(20) if i != FAILING}


def test_a_job_that_raises_fails_alone() -> None:
    jobs = [x for x in range(8) if x != SLOW]
    out, done, failed, _ = _map(jobs)
    expected = [None if x == FAILING else 2 * x for x in jobs]
    assert out == expected
    assert failed == [(jobs.index(FAILING), "raised")]


def test_a_job_past_the_timeout_fails_alone_not_its_batch() -> None:
    """The pool gives up on a batch that runs past its timeout: its batch-mates are run again, each
    alone, so only the slow job fails (it was 8 of 8)."""
    jobs = [x for x in range(8) if x != FAILING]
    out, done, failed, pool = _map(jobs, workers=1, timeout_s=0.5)
    assert out == [None if x == SLOW else 2 * x for x in jobs]
    assert failed == [(jobs.index(SLOW), "timeout")]
    assert pool.batches[0] == len(jobs) and all(size == 1 for size in pool.batches[1:])
