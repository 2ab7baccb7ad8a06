"""The call into MixPR (in a worker) and the router question, for one conversation.

The auto router needs an LLM answer from inside the job: the job calls ``litellm.completion``
itself (synchronously, in the worker) with the router model's settings. Decisions are cached by
content (``gateway.compress.route_cache``), and a cached route is passed back in as forced. The pool itself
is ``gateway.run.workers``; when and how much to compress is ``gateway.compress.policy``.

A request takes a place in the compression queue at its first pool job, counting included: a
count of a huge text waits behind compressions for the same workers and holds the same 4 MB, so
it is admitted like one (short texts are counted on the loop and never queue). When the pool
fails (a worker crashed twice, a job timed out), the original prompt goes out if it fits, else a
503 ``compression_unavailable``: a server fault is never the client's 400.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import mixpr.engine
from gateway.compress import conversation, policy, warm_up
from gateway.compress.policy import Control, Target
from gateway.compress.route_cache import RouteCache
from gateway.config import GatewayConfig, MixprSettings
from gateway.errors import CompressionFailed, CompressionUnavailable, ContextLengthExceeded, Overloaded
from gateway.run import offload
from gateway.run.bridge import Ticket
from gateway.run.gate import Gate
from gateway.run.workers import JobFailed, Workers
from mixpr.budget import join_spans
from mixpr.tokens import count_tokens, is_loaded

log = logging.getLogger("gateway.compress.compressor")

INLINE_COUNT_CHARS = 200_000  # shorter texts are counted in this process: a pool hop costs more
# Of those, texts over this many characters (1-2 ms to count, up to 15 ms at INLINE_COUNT_CHARS,
# more on a busy machine) are counted in a thread (``gateway.run.offload``), not on the loop.
THREAD_COUNT_CHARS = 20_000
# No real text averages more than ~6 characters per token (English ~4, code ~3, base64 ~2.5);
# a text over this many characters per threshold token is over the threshold without counting.
CHARS_PER_TOKEN_CEILING = 16
MAX_ATTEMPTS = 3  # compress, recount, shrink the budget and retry when the result does not fit
SHRINK_MARGIN = 0.9
UNAVAILABLE_RETRY_AFTER_S = 5  # a replacement worker takes a few seconds to start
TEST_HOLD_ENV = "MIXPR_TEST_HOLD_JOBS_WHILE"  # test-only: compress jobs wait while this file exists
START_SUFFIX = ".start"  # test-only: new workers' warm-up waits while the file + this suffix exists
FAILURES = {"crash": "a compression worker crashed", "timeout": "compressing took longer than "
            "compression_timeout_s", "unavailable": "no compression worker could be started"}



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
    budget: int | None = None  # what MixPR was asked to keep, and what the window left it
    room: int | None = None
    spans: tuple[tuple[int, int], ...] = ()  # kept spans of the conversation's stream, when compressed
    failed_open: bool = False  # compression failed and the original went out: not a state to remember
    # prompt tokens that repeat the previous turn's request exactly (gateway.conversation.history)
    reused_tokens: int = 0
    reset: bool = False  # a reset since the previous request: its older part was compressed harder
    new_forms: int = 0  # message forms computed for this request (found in no cache: memory, Redis)
    reuse_basis: str = "none"  # how reused_tokens is known: remembered, recomputed or none
    resets: int = 0  # reset points in the conversation so far
    max_tokens: tuple[int, int] | None = None  # (asked, sent) when the reply's limit was lowered (core.reply)
    # Resets, in input tokens' worth: what the resets made for this request are expected to save over
    # the turns to come, less their cache write, and the cache reads this request saves by all resets
    # so far (the prompt at first-sight forms less the prompt sent, at the cache-read price).
    reset_saving: tuple[float, float] | None = None
    shadow: tuple[tuple[str, str], ...] = ()  # observe mode's x-mixpr-shadow* headers (core.shadow)
    cache: str | None = None  # "cold" or "warm": the provider's cache, as far as the gateway knows
    tier: str | None = None  # the x-mixpr-price-tier header (gateway.core.tiers): the tier billed, kept under


def pool_for(config: GatewayConfig) -> Workers:
    """The worker pool ``config`` asks for (not started)."""
    general = config.general_settings
    return Workers(workers=general.compression_workers, executor=general.compression_executor,
                   timeout_s=general.compression_timeout_s)


def needs_router(config: GatewayConfig) -> bool:
    """Whether any model asks the auto router, whose LiteLLM the workers then import as they start."""
    return bool(router_models(config))  # a config naming an unknown router model is refused on load


def router_models(config: GatewayConfig) -> tuple[str, ...]:
    """The LiteLLM models (``litellm_params.model``) the auto router asks, for each worker's warm-up."""
    asked = set()
    for entry in config.model_list:
        settings = entry.settings(config.mixpr_settings)
        router = config.model(settings.router_model or entry.model_name)
        if settings.router == "auto" and router is not None:
            asked.add(router.upstream_model)
    return tuple(sorted(asked))


# What the pool's fork server imports once (``Workers.start``'s ``preload``): the module that loads what
# every worker's warm-up does, and, for the auto router, LiteLLM with what its first call loads.
PRELOAD = ("gateway.compress.preload",)
ROUTER_PRELOAD = "gateway.compress.preload_router"


async def start_pool(workers: Workers, *, with_router: bool, routers: tuple[str, ...] = ()) -> None:
    """Start ``workers`` and warm each as compression needs it (``Compressor.start`` does this too).
    ``routers``: the LiteLLM models the router asks (``router_models``), each asked once on loopback."""
    await workers.start(_warm_up, with_router, routers,
                        preload=(*PRELOAD, ROUTER_PRELOAD) if with_router else PRELOAD)


class Compressor:
    """The router cache, and the decision of what reaches the upstream; jobs run on ``workers``."""

    def __init__(self, workers: Workers, *, route_cache_size: int, max_queued: int | None = None,
                 metrics: Any = None) -> None:
        self.workers = workers
        queued = 4 * workers.size if max_queued is None else max_queued
        self.queue = Gate(workers.size + queued)  # requests being compressed or waiting for a worker
        self.builds = offload.Builds(self.queue.limit)  # threads for conversation builds
        self.metrics = metrics
        self.routes = RouteCache(route_cache_size)

    async def start(self, *, with_router: bool, routers: tuple[str, ...] = ()) -> None:
        # Short texts are counted in this process too: loading a tokenizer takes a second or more,
        # which on the first request's loop would stall every other request.
        await asyncio.gather(start_pool(self.workers, with_router=with_router, routers=routers),
                             offload.run(warm_up.first_counts))

    def close(self) -> None:
        self.workers.close()
        self.builds.close()

    def ticket(self) -> Ticket:
        """A place in this compressor's queue for one request (released by whoever asked for it)."""
        return Ticket(self.queue, self.workers, self._shed)

    def _shed(self) -> None:
        if self.metrics is not None:
            self.metrics.shed.labels("compression_queue").inc()

    async def prepare(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: Any,
        target: Target,
        settings: MixprSettings,
        control: Control,
        router: Router | None,
        pool: Ticket | None = None,
    ) -> Outcome:
        """The messages to forward: unchanged below the trigger, else compressed to fit.

        ``pool``: a ticket the caller holds across several calls."""
        ticket = pool or self.ticket()
        try:
            return await self._prepare(ticket, messages, tools, target, settings, control, router)
        except JobFailed as exc:  # counting failed, so whether the original fits is unknown
            self._failed(exc.cause)
            raise _unavailable(exc.cause, None, target) from exc
        finally:
            if pool is None:
                ticket.release()

    async def fixed_tokens(self, pool: Ticket, conv: conversation.Conversation, target: Target,
                           tools: Any) -> int:
        """What compression never shrinks: verbatim text, framing, media and tool definitions."""
        fixed = await self.count(pool, conv.verbatim_text, target)  # a huge system prompt happens
        fixed += conversation.overhead_tokens(conv, target.model)
        if tools:  # tool schemas can be megabytes too: counted like any other text
            fixed += await self.count(pool, json.dumps(tools), target)
        return fixed

    async def count(self, pool: Ticket, text: str, target: Target) -> int:
        """The target model's tokens in ``text`` (``Target.tokens``): counted on the loop when short
        and the model's encoding is loaded, in a thread when longer (or to load it, half a second that
        would stall every request: a request held while the gateway loaded comes before its warm-up's
        counts), in the pool when long."""
        if len(text) < INLINE_COUNT_CHARS:
            big = len(text) > THREAD_COUNT_CHARS or not is_loaded(target.model)
            return target.tokens(await offload.inline_or_run(big, count_tokens, text, target.model))
        return target.tokens(await pool.run(count_tokens, text, target.model))

    async def passes(self, pool: Ticket, messages: list[dict[str, Any]], *, tools: Any, target: Target,
                     settings: MixprSettings, control: Control) -> bool:
        """Whether ``prepare`` would forward ``messages`` untouched (below the trigger); counting only."""
        return (await self._measure(pool, messages, tools, target, settings, control))[3]

    async def _measure(
        self, pool: Ticket, messages: list[dict[str, Any]], tools: Any, target: Target,
        settings: MixprSettings, control: Control,
    ) -> tuple[conversation.Conversation, int, int | None, bool]:
        """The conversation, its fixed tokens, its stream's tokens (None: not counted) and whether it
        stays below the trigger."""
        conv = await split(messages)
        fixed = await self.fixed_tokens(pool, conv, target, tools)
        threshold = policy.threshold(target.within(fixed), settings, control)
        # Counting 1M tokens takes ~0.4 s; when the text is far too long for any tokenizer to bring
        # it under the threshold, MixPR counts it anyway in the same job, so skip the first count.
        if threshold is not None and len(conv.text) > CHARS_PER_TOKEN_CEILING * threshold:
            return conv, fixed, None, False
        stream_tokens = await self.count(pool, conv.text, target)
        return conv, fixed, stream_tokens, threshold is None or stream_tokens + fixed <= threshold

    async def _prepare(
        self,
        pool: Ticket,
        messages: list[dict[str, Any]],
        tools: Any,
        target: Target,
        settings: MixprSettings,
        control: Control,
        router: Router | None,
    ) -> Outcome:
        conv, fixed, stream_tokens, passes = await self._measure(pool, messages, tools, target, settings,
                                                                 control)
        if passes:
            total = stream_tokens + fixed
            return Outcome(messages, "passthrough", total, total)
        try:
            counts = (stream_tokens, fixed)
            return await self._compress(pool, conv, counts, target, settings, control, router)
        except (ContextLengthExceeded, Overloaded):
            raise
        except Exception as exc:  # a bug, a pathological text or a dead worker must not cost an answer
            return await self._fail_open(pool, exc, messages, conv, stream_tokens, fixed, target)

    async def _fail_open(
        self,
        pool: Ticket,
        exc: Exception,
        messages: list[dict[str, Any]],
        conv: conversation.Conversation,
        stream_tokens: int | None,
        fixed: int,
        target: Target,
    ) -> Outcome:
        """After a failed compression: the original when it fits, else 503 (pool) or 500 (MixPR raised)."""
        cause = exc.cause if isinstance(exc, JobFailed) else "error"
        self._failed(cause)
        log.warning("compression failed (%s, %s); deciding whether the original fits",
                    cause, type(exc).__name__)
        log.debug("traceback", exc_info=exc)
        # Over this many characters it cannot fit: no need to count (and the pool may be down).
        if stream_tokens is None and len(conv.text) <= CHARS_PER_TOKEN_CEILING * target.limit:
            stream_tokens = await self.count(pool, conv.text, target)
        if stream_tokens is not None and stream_tokens + fixed <= target.limit:
            total = stream_tokens + fixed
            return Outcome(messages, "passthrough", total, total, failed_open=True)
        if isinstance(exc, JobFailed):
            total = stream_tokens + fixed if stream_tokens is not None else None
            raise _unavailable(exc.cause, total, target) from exc
        if stream_tokens is None:
            stream_tokens = await self.count(pool, conv.text, target)
        # MixPR itself raised: a server fault that a retry of the same prompt would hit again, so a
        # 500 without Retry-After, never a 4xx (the client's prompt was fine).
        raise CompressionFailed(
            f"The prompt is {stream_tokens + fixed} tokens but the model accepts {target.window} "
            f"(with {target.reserve} kept for the reply), and compressing it failed on the server "
            f"({type(exc).__name__}), so it was not sent.",
        ) from exc

    def _failed(self, cause: str) -> None:
        if self.metrics is not None:
            self.metrics.compression_failures.labels(cause).inc()

    async def _compress(
        self,
        pool: Ticket,
        conv: conversation.Conversation,
        counts: tuple[int | None, int],
        target: Target,
        settings: MixprSettings,
        control: Control,
        router: Router | None,
    ) -> Outcome:
        stream_tokens, fixed = counts
        target = target.within(fixed)
        parts = _never_cut(conv, fixed, target) if target.limit <= fixed else ""  # only for the 400
        total = stream_tokens + fixed if stream_tokens is not None else None
        budget = max(1, policy.budget(fixed, target, settings, control, parts, total))
        route = control.route or settings.router
        key = await self.routes.key(router.name, conv.text) if route == "auto" and router else None
        if key:
            route = await self.routes.decided(key) or route  # a cached decision is forced
        with self.routes.asking(key if route == "auto" else None):
            return await self._fit(pool, conv, stream_tokens, fixed, budget, route, key, target,
                                   settings, router)

    async def _fit(
        self,
        pool: Ticket,
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
        asked = budget
        for _ in range(MAX_ATTEMPTS):
            # MixPR counts with tiktoken: budgets go in, counts come back, in its units.
            counted = target.counted(stream_tokens) if stream_tokens is not None else None
            spans, stats, kept = await pool.run(
                compress_job, conv.text, budget_tokens=target.counted(budget), route=route,
                method=settings.method, model=target.model, boundaries=conv.boundaries,
                original_tokens=counted, query_span=conv.query_span,
                router=router if route == "auto" else None,
            )
            if key and stats.get("router") == "llm":
                self.routes.put(key, stats["route"])
            route = stats.get("route") or route  # a retry with a smaller budget keeps the decision
            if stream_tokens is None:  # counted by MixPR when we skipped it
                stream_tokens = target.tokens(stats["original_tokens"])
            messages = conversation.rebuild(conv, spans)
            # Only the stream changed: the verbatim text, framing and tools still cost ``fixed``.
            final = await self._stream_tokens(pool, conv, messages, spans, kept, target) + fixed
            if final <= target.ceiling:  # the limit, or just under the price line
                elapsed = (time.perf_counter() - started) * 1000
                return Outcome(messages, "compressed", stream_tokens + fixed, final, stats.get("route"),
                               elapsed, asked, target.ceiling - fixed, spans=tuple(spans))
            budget = max(1, int(budget * target.ceiling / final * SHRINK_MARGIN))
        raise ContextLengthExceeded(
            f"The prompt is {stream_tokens + fixed} tokens and the model accepts {target.window} "
            f"(with {target.reserve} kept for the reply). Compressed it is still {final} tokens: "
            f"what is never compressed alone takes too much ({_never_cut(conv, fixed, target)}).",
            param="messages",
        )

    async def _stream_tokens(self, pool: Ticket, conv: conversation.Conversation,
                             messages: list[dict[str, Any]], spans: list[tuple[int, int]], tokens: int | None,
                             target: Target) -> int:
        """The rebuilt messages' stream tokens. When the stream is the kept spans' joined text (one
        message cut, or cuts inside the messages), the worker counted exactly that text already, so it
        is not encoded again (~6 ms for 12k tokens); otherwise it is counted."""
        text = (await split(messages)).text
        if tokens is not None:
            big = len(text) > THREAD_COUNT_CHARS
            if await offload.inline_or_run(big, _is_joined, text, conv.text, spans):
                return target.tokens(tokens)
        return await self.count(pool, text, target)


def _is_joined(text: str, whole: str, spans: list[tuple[int, int]]) -> bool:
    """Whether ``text`` is ``spans`` of ``whole`` joined as MixPR joins its kept chunks."""
    return text == join_spans(whole, spans)


def _never_cut(conv: conversation.Conversation, fixed: int, target: Target) -> str:
    """The parts compression leaves whole, largest first, in the model's tokens (tool definitions:
    what ``fixed`` holds besides the messages' own parts)."""
    parts = [(name, target.tokens(n)) for name, n in conversation.never_cut(conv, target.model)]
    tools = fixed - sum(n for name, n in parts if name != "the question")
    if tools > 0:
        parts.append(("tool definitions", tools))
    return ", ".join(f"{name} {n:,} tokens" for name, n in sorted(parts, key=lambda p: -p[1]))


async def split(messages: list[dict[str, Any]]) -> conversation.Conversation:
    """``conversation.split``: per-part work, so in a worker thread for many messages or parts."""
    return await offload.inline_or_run(offload.many(messages), conversation.split, messages)


def _unavailable(cause: str, total: int | None, target: Target) -> CompressionUnavailable:
    size = f"the original prompt ({total} tokens)" if total is not None else "the original prompt"
    return CompressionUnavailable(
        f"Compressing the prompt failed on the server ({FAILURES.get(cause, cause)}), and {size} does "
        f"not fit the model's {target.window} tokens (with {target.reserve} kept for the reply), so "
        f"it was not sent. Retry shortly.",
        retry_after=UNAVAILABLE_RETRY_AFTER_S,
    )


def _warm_up(with_router: bool, routers: tuple[str, ...] = ()) -> None:
    """Runs in each worker once: load tokenizers (and LiteLLM, for the auto router) up front. A worker
    forked from a fork server that preloaded them (``PRELOAD``) finds them loaded, but the first use
    of each page of it copies that page (2,500 pages a routing question, 13 ms against 5 ms after;
    12 to 17 ms more for the first MixPR job): one job and one question of each router's model touch
    them now, the first call again in this process (``gateway.upstream.warm``).

    What is loaded by then lives as long as the worker: frozen (``gc.freeze``), as the fork server
    froze its own. Otherwise a full collection in a worker walks LiteLLM's and scikit-learn's objects,
    about 270 ms in the middle of a job; this warm-up's allocations brought the first one due within
    the first few requests."""
    _hold_for_tests(START_SUFFIX)
    warm_up.load_tables()
    warm_up.first_job()
    if with_router:
        # By name, as the fork server imports it: the plug-in, which imports this module, must not
        # reach the forwarding layer (pyproject's contracts).
        importlib.import_module(ROUTER_PRELOAD).first_call(routers)
    gc.freeze()


def compress_job(
    text: str, *, budget_tokens: int, route: str, method: str, model: str, boundaries: tuple[int, ...],
    original_tokens: int, router: Router | None, query_span: tuple[int, int] | None = None,
) -> tuple[list[tuple[int, int]], dict[str, Any], int | None]:
    """One MixPR call, in a worker; picklable arguments in, spans, stats and the exact tiktoken count
    of the spans' joined text (``join_spans``; None when MixPR did not count it) out."""
    _hold_for_tests()
    ask = functools.partial(_ask_router, router) if router else None
    result = mixpr.engine.compress(text, budget_tokens=budget_tokens, route=route, ask_llm=ask, method=method,
                            model=model, boundaries=boundaries, original_tokens=original_tokens,
                            query_span=query_span)
    return result.spans, result.stats, result.tokens


def _hold_for_tests(suffix: str = "") -> None:
    """Test-only (the variable is never set in production): wait while the named file exists, so a
    test can hold a job on its worker and kill it, time it out or fill the queue behind it; with
    ``START_SUFFIX`` appended, hold a new worker's start (a replacement that takes its time)."""
    path = os.environ.get(TEST_HOLD_ENV)
    while path and os.path.exists(path + suffix):
        time.sleep(0.02)


def _ask_router(router: Router, prompt: str) -> str:
    """The router's y/n, asked from the worker; "" on any failure so MixPR uses its heuristic."""
    import litellm  # imported in the worker only with a router

    messages = [{"role": "user", "content": prompt}]
    kwargs = {**router.kwargs, "messages": messages, "timeout": router.timeout}
    try:
        return litellm.completion(**kwargs).choices[0].message.content or ""
    except Exception as exc:
        log.warning("router call to %s failed (%s); using the heuristic", router.name, type(exc).__name__)
        return ""
