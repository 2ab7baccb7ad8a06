"""Big upstream requests are built, and big answers read, in worker threads: never on the event loop.

The openai SDK, which LiteLLM uses for every OpenAI-compatible upstream, walks the whole request
against its typed schema before sending it (``async_maybe_transform``): about 0.5-1 ms per chat
message or content part and 60 us per string of an ``input`` or ``prompt`` list, in an ``async``
function that never yields. So one request of 19,000 parts held the gateway's loop, and every other
request, for 10-20 s. Reading an answer of one object per input (embeddings, a batch of prompts)
costs about as much again. Both scale with what the client sent, so requests with more than
``INLINE_ITEMS`` items move that work here; smaller ones stay on the loop, where a thread hop would
cost more than the walk.

- ``install`` gives the SDK's chat and legacy completions resources a transform that runs in this
  pool for big bodies (streamed or not). It is the SDK's synchronous twin, which does the same walk
  and differs only in reading file objects, which a JSON body never holds.
- ``run`` runs a whole blocking call here (LiteLLM's synchronous embedding call: the SDK transforms
  that request synchronously inside its async method, and the answer is as big as the request).

Why not run LiteLLM on an event loop of its own: measured, that loop is blocked by the same walk,
so every short request's upstream call waits behind the big one (short p50 12.9 s against 7.8 s
before); and LiteLLM's process-wide logging worker breaks when calls run on several loops.
A cancelled request cannot stop its thread: the walk finishes, its result is dropped.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, TypeVar

import openai.resources.chat.completions.completions as chat_resource
import openai.resources.completions as completions_resource
from openai._utils import maybe_transform

log = logging.getLogger("gateway.upstream_offload")

T = TypeVar("T")
INLINE_ITEMS = 64  # about 50 ms of walking at most stays on the loop
# Walks are CPU-bound and share the GIL, so more threads would not finish them sooner; two keep one
# big request from queueing behind another, and every other request keeps the loop's share.
THREADS = 2
LIST_KEYS = ("messages", "tools", "input", "prompt")

_pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="mixpr-upstream-build")
_PATCHED = "_mixpr_offloaded"


def items(body: dict[str, Any]) -> int:
    """How many items building ``body`` walks one by one: list entries of its messages, tools,
    input or prompt, and the content parts of its messages."""
    count = 0
    for key in LIST_KEYS:
        entries = body.get(key)
        if isinstance(entries, list):
            count += len(entries) + sum(len(entry["content"]) for entry in entries
                                        if isinstance(entry, dict) and isinstance(entry.get("content"), list))
    return count


def is_big(body: dict[str, Any]) -> bool:
    return items(body) > INLINE_ITEMS


async def run(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in the pool."""
    return await asyncio.wrap_future(_pool.submit(fn, *args, **kwargs))


def install() -> None:
    """Route the SDK's request transform for big chat and legacy completion bodies to the pool."""
    for module in (chat_resource, completions_resource):
        _patch(module)


def _patch(module: ModuleType) -> None:
    original = getattr(module, "async_maybe_transform", None)
    if original is None:  # a new SDK layout: tests/gateway/test_upstream_offload.py says so
        log.warning("%s has no async_maybe_transform; big requests are built on the event loop",
                    module.__name__)
        return
    if not getattr(original, _PATCHED, False):
        offloaded = functools.partial(_transform, original)
        setattr(offloaded, _PATCHED, True)
        module.async_maybe_transform = offloaded


async def _transform(original: Callable[[Any, Any], Awaitable[Any]], data: Any, expected_type: Any) -> Any:
    if isinstance(data, dict) and is_big(data):
        return await run(maybe_transform, data, expected_type)
    return await original(data, expected_type)
