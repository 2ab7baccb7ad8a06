"""The compression worker pool: where CPU-heavy jobs run, off the event loop.

MixPR and tiktoken are CPU work, and measured on a 1M-token prompt they hold the GIL for up to
~220 ms at a time (chunking regexes, scikit-learn's tokenizer, tiktoken's merge loop), so worker
*threads* would still freeze every other request. Jobs therefore run in a small pool of worker
*processes* (``compression_executor: process``, the default); ``thread`` remains for tests and
tiny deployments. A job gets plain picklable arguments and returns plain results.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import multiprocessing
from collections.abc import Callable
from typing import Any


class Workers:
    """A pool of ``workers`` processes (or threads) that runs jobs for the event loop."""

    def __init__(self, *, workers: int, executor: str = "process") -> None:
        self.size = workers
        self._pool = _make_pool(executor, workers)

    async def start(self, warm_up: Callable[..., Any], *args: Any) -> None:
        """Run ``warm_up`` once per worker now (imports take seconds), not on the first long prompt."""
        await asyncio.gather(*(self.run(warm_up, *args) for _ in range(self.size)))

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        # Waiting lets worker processes exit cleanly (no leaked semaphores); queued jobs are dropped.
        self._pool.shutdown(wait=True, cancel_futures=True)


def _make_pool(executor: str, workers: int) -> concurrent.futures.Executor:
    if executor == "thread":
        return concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mixpr")
    # spawn, not fork: the gateway has threads (LiteLLM's, the loop's) that fork would copy mid-state.
    context = multiprocessing.get_context("spawn")
    return concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context)
