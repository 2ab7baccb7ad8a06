"""Per-item work of big requests runs in worker threads, never on the event loop.

A request's per-item passes (parsing its JSON, validating and translating its messages, splitting
its conversation, LiteLLM's and the openai SDK's walks before it is sent) each cost microseconds per
message or content part. For a request of thousands of parts they add up to seconds on a loaded
machine, during which the loop serves no other request. So bodies of more than ``INLINE_ITEMS``
items do that work here; smaller ones stay on the loop, where a thread hop would cost more.

Threads, not the compression worker processes: the work is on objects the loop already holds, and
pickling 19,000 parts to a process and back costs about as much as the walk itself. The threads
share the GIL with the loop, which still gets its turn every switch interval (5 ms).
This module imports nothing heavy: compression worker processes import its users.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
INLINE_ITEMS = 64  # about 50 ms of walking at most stays on the loop
INLINE_JSON_BYTES = 256_000  # about 5 ms of json.loads at most stays on the loop
# Walks are CPU-bound and share the GIL, so more threads would not finish them sooner; two keep one
# big request from queueing behind another, and every other request keeps the loop's share.
THREADS = 2
LIST_KEYS = ("messages", "tools", "input", "prompt")

THREAD_PREFIX = "mixpr-big-request"
# Conversation builds (``gateway.conversation.history``) wait on the compression pool for most of their
# time, seconds when cold: in the threads above they would stall every big request's parsing. They
# get their own (``Builds``).
BUILD_PREFIX = "mixpr-build"
SPARE_BUILD_THREADS = 2  # for builds that need no pool job, however many others wait on the pool

_pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix=THREAD_PREFIX)


def items(body: dict[str, Any]) -> int:
    """How many items building ``body`` walks one by one: list entries of its messages, tools,
    input or prompt, and the content parts of its messages."""
    return sum(list_items(body.get(key)) for key in LIST_KEYS)


def list_items(entries: Any) -> int:
    """The entries of a list of messages (or input items), and their content parts; 0 if not a list."""
    if not isinstance(entries, list):
        return 0
    return len(entries) + sum(len(entry["content"]) for entry in entries
                              if isinstance(entry, dict) and isinstance(entry.get("content"), list))


def is_big(body: Any) -> bool:
    return isinstance(body, dict) and items(body) > INLINE_ITEMS


def many(entries: Any) -> bool:
    """Whether a list of messages (or input items) is big enough for the pool (``list_items``)."""
    return list_items(entries) > INLINE_ITEMS


async def run(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in the pool."""
    return await asyncio.wrap_future(_pool.submit(fn, *args, **kwargs))


async def inline_or_run(big: bool, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``: in the pool when ``big``, else right here on the loop."""
    return await run(fn, *args, **kwargs) if big else fn(*args, **kwargs)


class Builds:
    """Threads for work that may wait on the compression pool (conversation builds), one pool of
    them per compression queue.

    A build waits on the pool only once the queue admitted its request (``gateway.run.bridge``), so
    at most ``admitted`` builds wait there at a time; a build whose request ended may still wait
    for the batch it had running. Twice that many threads, and ``SPARE_BUILD_THREADS`` more, so a
    build that needs no pool job (a conversation below the trigger, remembering what was sent)
    never queues behind builds that wait. Threads start only when needed."""

    def __init__(self, admitted: int) -> None:
        self.threads = 2 * admitted + SPARE_BUILD_THREADS
        self._executor = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix=BUILD_PREFIX)

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in one of these threads."""
        return await asyncio.wrap_future(self._executor.submit(fn, *args, **kwargs))

    def close(self) -> None:
        """No new work; what runs finishes on its own (a thread cannot be stopped)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
