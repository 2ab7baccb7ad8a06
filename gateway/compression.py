"""When to compress, and doing it without stalling the event loop.

MixPR and tiktoken are CPU work, and measured on a 1M-token prompt they hold the GIL for up to
~220 ms at a time (chunking regexes, scikit-learn's tokenizer, tiktoken's merge loop), so worker
*threads* would still freeze every other request. The work therefore runs in a small pool of
worker *processes* (``compression_executor: process``, the default); ``thread`` remains for
tests and tiny deployments. A job gets the text and plain options and returns spans and stats.

The auto router needs an LLM answer from inside the job: the job calls ``litellm.completion``
itself (synchronously, in the worker) with the router model's settings. Decisions are cached in
the gateway by a hash of the model and the text, and a cached route is passed back in as forced.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import hashlib
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mixpr
from gateway import conversation
from gateway.config import MixprSettings
from gateway.errors import ContextLengthExceeded
from mixpr.tokens import count_tokens

log = logging.getLogger("gateway.compression")

INLINE_COUNT_CHARS = 200_000  # shorter texts are counted on the loop: a pool hop costs more
# No real text averages more than ~6 characters per token (English ~4, code ~3, base64 ~2.5);
# a text over this many characters per threshold token is over the threshold without counting.
CHARS_PER_TOKEN_CEILING = 16
MAX_ATTEMPTS = 3  # compress, recount, shrink the budget and retry when the result does not fit
SHRINK_MARGIN = 0.9



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
class Router:
    """How to ask the auto router: a cache key for the model and ``litellm.completion`` kwargs."""

    name: str
    kwargs: dict[str, Any]
    timeout: float


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

    def __init__(self, *, workers: int, route_cache_size: int, executor: str = "process") -> None:
        self._workers = workers
        self._pool = _make_pool(executor, workers)
        self._cache = _LruCache(route_cache_size)
        # Router decisions being made right now, by content key: an identical request waits for
        # the first one's answer instead of asking the router model again.
        self._deciding: dict[str, asyncio.Future[None]] = {}

    async def start(self, *, with_router: bool) -> None:
        """Start every worker now (imports take seconds) rather than on the first long prompt."""
        await asyncio.gather(*(self.run(_warm_up, with_router) for _ in range(self._workers)))

    def close(self) -> None:
        # Waiting lets worker processes exit cleanly (no leaked semaphores); queued jobs are dropped.
        self._pool.shutdown(wait=True, cancel_futures=True)

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
        router: Router | None,
    ) -> Outcome:
        """The messages to forward: unchanged below the trigger, else compressed to fit."""
        conv = conversation.split(messages)
        fixed = await self._count(conv.verbatim_text, target.model)  # a huge system prompt happens
        fixed += conversation.overhead_tokens(conv, target.model, tools)
        threshold = _threshold(target, settings, control)
        stream_tokens: int | None = None
        # Counting 1M tokens takes ~0.4 s; when the text is far too long for any tokenizer to bring
        # it under the threshold, MixPR counts it anyway in the same job, so skip the first count.
        if threshold is None or len(conv.text) <= CHARS_PER_TOKEN_CEILING * threshold:
            stream_tokens = await self._count(conv.text, target.model)
            if threshold is None or stream_tokens + fixed <= threshold:
                total = stream_tokens + fixed
                return Outcome(messages, "passthrough", total, total)
        try:
            counts = (stream_tokens, fixed)
            return await self._compress(conv, counts, target, settings, control, router)
        except ContextLengthExceeded:
            raise
        except Exception as exc:  # a bug or a pathological text must not cost the user an answer
            log.warning("compression failed (%s); deciding whether the original fits", type(exc).__name__)
            log.debug("traceback", exc_info=exc)
            if stream_tokens is None:
                stream_tokens = await self._count(conv.text, target.model)
            total = stream_tokens + fixed
            if total <= target.limit:
                return Outcome(messages, "passthrough", total, total)
            raise ContextLengthExceeded(
                f"The prompt is {total} tokens but the model accepts {target.window} "
                f"(with {target.reserve} kept for the reply), and compressing it failed "
                f"({type(exc).__name__}), so it was not sent.",
                param="messages",
            ) from exc

    async def _count(self, text: str, model: str) -> int:
        if len(text) < INLINE_COUNT_CHARS:
            return count_tokens(text, model)
        return await self.run(count_tokens, text, model)

    async def _compress(
        self,
        conv: conversation.Conversation,
        counts: tuple[int | None, int],
        target: Target,
        settings: MixprSettings,
        control: Control,
        router: Router | None,
    ) -> Outcome:
        stream_tokens, fixed = counts
        budget = _budget(fixed, target, settings, control)
        route = control.route or settings.router
        key = await self._route_key(router, conv.text) if route == "auto" and router else None
        if key:
            route = await self._decided(key) or route  # a cached decision is forced
        # Only one request asks per key (no await between this check and the registration).
        asking = key if route == "auto" and key not in self._deciding else None
        if asking:
            self._deciding[asking] = asyncio.get_running_loop().create_future()
        try:
            return await self._fit(conv, stream_tokens, fixed, budget, route, key, target,
                                   settings, router)
        finally:
            if asking:
                self._deciding.pop(asking).set_result(None)

    async def _decided(self, key: str) -> str | None:
        """The cached route for ``key``, after waiting for an identical request that is asking now."""
        pending = self._deciding.get(key)
        if pending is not None:
            await asyncio.shield(pending)
        return self._cache.get(key)

    async def _fit(
        self,
        conv: conversation.Conversation,
        stream_tokens: int | None,
        fixed: int,
        budget: int,
        route: str,
        key: str | None,
        target: Target,
        settings: MixprSettings,
        router: Router | None,
    ) -> Outcome:
        """Compress, recount, and shrink the budget until the rebuilt messages fit the window."""
        started = time.perf_counter()
        for _ in range(MAX_ATTEMPTS):
            spans, stats = await self.run(
                compress_job, conv.text, budget_tokens=budget, route=route, method=settings.method,
                model=target.model, boundaries=conv.boundaries, original_tokens=stream_tokens,
                query_span=conv.query_span,
                router=router if route == "auto" else None,
            )
            if key and stats.get("router") == "llm":
                self._cache.put(key, stats["route"])
            route = stats.get("route") or route  # a retry with a smaller budget keeps the decision
            stream_tokens = stats["original_tokens"]  # counted by MixPR when we skipped it
            messages = conversation.rebuild(conv, spans)
            # Only the stream changed: the verbatim text, framing and tools still cost ``fixed``.
            final = count_tokens(conversation.split(messages).text, target.model) + fixed
            if final <= target.limit:
                elapsed = (time.perf_counter() - started) * 1000
                return Outcome(messages, "compressed", stream_tokens + fixed, final, stats.get("route"),
                               elapsed)
            budget = max(1, int(budget * target.limit / final * SHRINK_MARGIN))
        raise ContextLengthExceeded(
            f"The prompt is {stream_tokens + fixed} tokens and the model accepts {target.window} "
            f"(with {target.reserve} kept for the reply). Compressed it is still {final} tokens: "
            f"the parts kept verbatim (system messages, tool definitions and calls, images, "
            f"the final question) alone take too much.",
            param="messages",
        )

    async def _route_key(self, router: Router, text: str) -> str:
        # hashlib releases the GIL on large inputs, but encoding 4 MB does not: off the loop if big.
        if len(text) < INLINE_COUNT_CHARS:
            return _route_key(router.name, text)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, _route_key, router.name, text)


def _route_key(name: str, text: str) -> str:
    return hashlib.sha256(name.encode() + b"\0" + text.encode("utf-8", "surrogatepass")).hexdigest()


def _make_pool(executor: str, workers: int) -> concurrent.futures.Executor:
    if executor == "thread":
        return concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mixpr")
    # spawn, not fork: the gateway has threads (LiteLLM's, the loop's) that fork would copy mid-state.
    context = multiprocessing.get_context("spawn")
    return concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context)


def _warm_up(with_router: bool) -> None:
    """Runs in each worker once: load tokenizers (and LiteLLM, for the auto router) up front."""
    count_tokens("warm up", "gpt-4o-mini")
    count_tokens("warm up", None)
    if with_router:
        from gateway import upstream  # noqa: F401  (a 4 s import, better at start than mid-request)


def compress_job(
    text: str, *, budget_tokens: int, route: str, method: str, model: str, boundaries: tuple[int, ...],
    original_tokens: int, router: Router | None, query_span: tuple[int, int] | None = None,
) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    """One MixPR call, in a worker; picklable arguments in, spans and stats out."""
    ask = functools.partial(_ask_router, router) if router else None
    result = mixpr.compress(text, budget_tokens=budget_tokens, route=route, ask_llm=ask, method=method,
                            model=model, boundaries=boundaries, original_tokens=original_tokens,
                            query_span=query_span)
    return result.spans, result.stats


def _ask_router(router: Router, prompt: str) -> str:
    """The router's y/n, asked from the worker; "" on any failure so MixPR uses its heuristic."""
    from gateway import upstream  # LiteLLM: imported in the worker only when a router is used

    messages = [{"role": "user", "content": prompt}]
    kwargs = {**router.kwargs, "messages": messages, "timeout": router.timeout}
    try:
        return upstream.ask_sync(kwargs)
    except Exception as exc:
        log.warning("router call to %s failed (%s); using the heuristic", router.name, type(exc).__name__)
        return ""


def _threshold(target: Target, settings: MixprSettings, control: Control) -> int | None:
    """Prompt tokens above which to compress; None: never (disabled for this request)."""
    if control.enabled is False:
        return None
    if control.enabled is True:  # asked for explicitly: compress whatever exceeds the budget
        return control.budget_tokens or settings.budget_tokens
    if settings.compress_above_tokens is not None:
        return settings.compress_above_tokens
    return target.limit


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
