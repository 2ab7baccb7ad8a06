"""When to compress, and doing it off the event loop.

MixPR and tiktoken are CPU work; they run in a small bounded thread pool (their heavy parts
release the GIL) so that a 1M-token compression never stalls other requests. The auto router
needs an LLM answer from inside that worker thread: it is asked on the event loop through
``run_coroutine_threadsafe`` and its decisions are cached by content hash.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import hashlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import mixpr
from gateway import conversation
from gateway.config import MixprSettings
from gateway.errors import ContextLengthExceeded
from mixpr.routing import parse_route
from mixpr.tokens import count_tokens

log = logging.getLogger("gateway.compression")

INLINE_COUNT_CHARS = 200_000  # shorter texts are counted on the loop: a pool hop costs more
MAX_ATTEMPTS = 3  # compress, recount, shrink the budget and retry when the result does not fit
SHRINK_MARGIN = 0.9

RouterCall = Callable[[str, str], Awaitable[str]]  # (router model name, prompt) -> answer


@dataclass(frozen=True)
class Control:
    """Per-request switches from the ``mixpr`` body field or ``x-mixpr-*`` headers."""

    enabled: bool | None = None  # None: the config's trigger decides; True: compress above budget
    route: str | None = None
    budget_tokens: int | None = None


@dataclass(frozen=True)
class Target:
    """What the request must fit: the model's window and what is kept free for the answer."""

    model: str  # tokenizer name (the upstream model)
    window: int
    reserve: int

    @property
    def limit(self) -> int:
        return self.window - self.reserve


@dataclass(frozen=True)
class Outcome:
    messages: list[dict[str, Any]]
    action: str  # "passthrough" | "compressed"
    original_tokens: int
    final_tokens: int
    route: str | None = None
    compress_ms: float | None = None


class Compressor:
    """The worker pool, the router cache, and the decision of what reaches the upstream."""

    def __init__(self, *, workers: int, route_cache_size: int, router: RouterCall) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mixpr")
        self._router = router
        self._cache = _LruCache(route_cache_size)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def prepare(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: Any,
        target: Target,
        settings: MixprSettings,
        control: Control,
        router_model: str,
    ) -> Outcome:
        """The messages to forward: unchanged below the trigger, else compressed to fit."""
        conv = conversation.split(messages)
        stream_tokens, fixed = await self._count(conv, target.model, tools)
        total = stream_tokens + fixed
        if not _triggered(total, target, settings, control):
            return Outcome(messages, "passthrough", total, total)
        try:
            counts = (stream_tokens, fixed)
            return await self._compress(conv, tools, counts, target, settings, control, router_model)
        except ContextLengthExceeded:
            raise
        except Exception as exc:  # a bug or a pathological text must not cost the user an answer
            log.warning("compression failed (%s); deciding whether the original fits", type(exc).__name__)
            log.debug("traceback", exc_info=exc)
            if total <= target.limit:
                return Outcome(messages, "passthrough", total, total)
            raise ContextLengthExceeded(
                f"The prompt is {total} tokens but the model accepts {target.window} "
                f"(with {target.reserve} kept for the reply), and compressing it failed "
                f"({type(exc).__name__}), so it was not sent.",
                param="messages",
            ) from exc

    async def _count(self, conv: conversation.Conversation, model: str, tools: Any) -> tuple[int, int]:
        if len(conv.text) + len(conv.verbatim_text) < INLINE_COUNT_CHARS:
            return _count(conv, model, tools)
        return await self.run(_count, conv, model, tools)

    async def _compress(
        self,
        conv: conversation.Conversation,
        tools: Any,
        counts: tuple[int, int],
        target: Target,
        settings: MixprSettings,
        control: Control,
        router_model: str,
    ) -> Outcome:
        stream_tokens, fixed = counts
        budget = _budget(fixed, target, settings, control)
        route = control.route or settings.router
        ask = self._asker(asyncio.get_running_loop(), router_model, settings.router_timeout_s)
        started = time.perf_counter()
        for _ in range(MAX_ATTEMPTS):
            result = await self.run(
                mixpr.compress, conv.text, budget_tokens=budget, route=route,
                ask_llm=ask if route == "auto" else None, method=settings.method, model=target.model,
                boundaries=conv.boundaries, original_tokens=stream_tokens,
            )
            messages = conversation.rebuild(conv, result.spans)
            final = sum(_count(conversation.split(messages), target.model, tools))
            if final <= target.limit:
                elapsed = (time.perf_counter() - started) * 1000
                return Outcome(messages, "compressed", stream_tokens + fixed, final,
                               result.stats.get("route"), elapsed)
            budget = max(1, int(budget * target.limit / final * SHRINK_MARGIN))
        raise ContextLengthExceeded(
            f"The prompt is {stream_tokens + fixed} tokens and the model accepts {target.window} "
            f"(with {target.reserve} kept for the reply). Compressed it is still {final} tokens: "
            f"the parts kept verbatim (system messages, tool definitions and calls, images, "
            f"the final question) alone take too much.",
            param="messages",
        )

    def _asker(self, loop: asyncio.AbstractEventLoop, model: str, timeout: float) -> Callable[[str], str]:
        """A sync ``ask_llm`` for the worker thread; errors answer "" so MixPR uses its heuristic."""

        def ask_llm(prompt: str) -> str:
            key = hashlib.sha256(f"{model}\0{prompt}".encode()).hexdigest()
            cached = self._cache.get(key)
            if cached is not None:
                return cached
            try:
                answer = asyncio.run_coroutine_threadsafe(self._router(model, prompt), loop).result(timeout)
            except Exception as exc:
                log.warning("router call to %s failed (%s); using the heuristic", model, type(exc).__name__)
                return ""
            if parse_route(answer) is not None:
                self._cache.put(key, answer)
            return answer

        return ask_llm


def _count(conv: conversation.Conversation, model: str, tools: Any) -> tuple[int, int]:
    """(tokens of the compressible stream, tokens of everything else)."""
    return count_tokens(conv.text, model), conversation.fixed_tokens(conv, model, tools)


def _triggered(total: int, target: Target, settings: MixprSettings, control: Control) -> bool:
    if control.enabled is False:
        return False
    if control.enabled is True:  # asked for explicitly: compress whatever exceeds the budget
        return total > (control.budget_tokens or settings.budget_tokens)
    if settings.compress_above_tokens is not None:
        return total > settings.compress_above_tokens
    return total > target.limit


def _budget(fixed: int, target: Target, settings: MixprSettings, control: Control) -> int:
    """Tokens MixPR may keep: the configured budget, capped by what the window leaves."""
    room = target.limit - fixed
    if room < 1:
        raise ContextLengthExceeded(
            f"The parts of the prompt that are never compressed (system messages, tool definitions "
            f"and calls, images, message framing) take {fixed} tokens, more than the {target.window} "
            f"the model accepts with {target.reserve} kept for the reply.",
            param="messages",
        )
    return min(control.budget_tokens or settings.budget_tokens, room)


class _LruCache:
    """A tiny thread-safe LRU map: worker threads read and write router decisions."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
            return self._data.get(key)

    def put(self, key: str, value: str) -> None:
        if self._size <= 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)
