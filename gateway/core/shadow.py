"""Observe mode (``mixpr_settings.mode: observe``): what compressing would have sent and saved,
while every request goes out exactly as the client sent it.

Per request, one of three things (the ``x-mixpr-shadow`` header says which):

- ``unchanged``: known before the response, at no cost beyond the count every passthrough makes: a
  single question below the trigger, which compressing would send as it is. ``x-mixpr-shadow-tokens``
  (what would have been sent) and ``x-mixpr-shadow-saving`` (0) come with it.
- ``sampled``: the compress-mode preparation runs after the response was sent
  (``gateway.core.after_response``), in one background task, one request at a time; its figures go to
  the metrics only.
- ``skipped``: ``general_settings.shadow_queue`` requests already wait or run, or the work has used
  its share of the time (below); nothing is computed, ``mixpr_shadow_skipped_total`` counts it. Under
  load the figures are a sample, and say so.

The work runs beside the requests that come next, and on two cores a compression beside them slows
them (issue 48: +2.5 ms p50 at 32 clients, for conversations). So it may take at most
``general_settings.shadow_share`` of the time: after a computation of ``t`` seconds, none starts and
every offer is skipped for ``t * (1 - share) / share``. At most about that share of requests then
overlaps the work, which leaves the median untouched; the share of requests computed
(``computed`` over ``computed`` and skipped) is what the load leaves, and the metrics say it.

Prices (``gateway.prices``) include the provider's prefix cache, so a saving the cache already gives
is not claimed twice: the client's bytes are priced with their previous turn read from the cache,
the gateway's bytes with what of them repeats the gateway's own previous request (``Outcome.reused_tokens``);
the rest of a conversation's turn is priced as a cache write (it is what the next turn reads), a
single question's at the input price. A turn can cost more compressed (a reset rewrites the cached
prefix), so the metrics carry both costs, never a saving that could not go down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.core import after_response, tally
from gateway.errors import GatewayError
from gateway.metrics import Metrics
from gateway.prices import Prices

log = logging.getLogger("gateway.core.shadow")

HEADER = "x-mixpr-shadow"
TOKENS_HEADER = "x-mixpr-shadow-tokens"
SAVING_HEADER = "x-mixpr-shadow-saving"
UNCHANGED, SAMPLED, SKIPPED = "unchanged", "sampled", "skipped"


@dataclass(frozen=True)
class Figures:
    """One request's prompt tokens as the client sent it and as compressing would have sent it, and
    how many of each the provider's prefix cache would serve."""

    original: int
    would_send: int
    original_cached: int = 0
    would_send_cached: int = 0
    written: bool = False  # a conversation's turn: what is not read from the cache is written to it

    def cost(self, prices: Prices) -> tuple[float, float]:
        """(the client's bytes, the gateway's bytes) at ``prices``, each at the long-context tier its
        own size is billed at (``Prices.at``)."""
        return (_cost(self.original, self.original_cached, prices.at(self.original), self.written),
                _cost(self.would_send, self.would_send_cached, prices.at(self.would_send), self.written))


def _cost(tokens: int, cached: int, prices: Prices, written: bool) -> float:
    fresh = prices.cache_write if written else prices.input
    cached = min(max(cached, 0), tokens)
    return cached * prices.cache_read + (tokens - cached) * fresh


def unchanged_headers(tokens: int) -> tuple[tuple[str, str], ...]:
    return ((HEADER, UNCHANGED), (TOKENS_HEADER, str(tokens)), (SAVING_HEADER, "0"))


class Shadow:
    """The bounded background work of observe mode, and its metrics."""

    def __init__(self, size: int, metrics: Metrics, *, share: float = 1.0) -> None:
        self.size = size
        self.metrics = metrics
        self.share = share
        self.held = 0  # requests given a place: waiting for their response, queued or running
        self.resume_at = 0.0  # time.monotonic() before which no work starts, nor is any taken
        self._queue: asyncio.Queue[tuple[str, Prices, Callable[[], Awaitable[Figures]]]] | None = None
        self._task: asyncio.Task[None] | None = None

    def record(self, model: str, figures: Figures, prices: Prices, result: str = UNCHANGED) -> None:
        m = self.metrics
        m.shadow_requests.labels(model, result).inc()
        m.shadow_tokens.labels(model, "original").inc(figures.original)
        m.shadow_tokens.labels(model, "would_send").inc(figures.would_send)
        m.shadow_cached_tokens.labels(model, "original").inc(figures.original_cached)
        m.shadow_cached_tokens.labels(model, "would_send").inc(figures.would_send_cached)
        original, would_send = figures.cost(prices)
        m.shadow_cost.labels(model, "original", prices.source).inc(original)
        m.shadow_cost.labels(model, "would_send", prices.source).inc(would_send)
        if m.stats is not None:  # the operator's page (gateway.stats), beside the same counters
            costs = (original, would_send)
            m.stats(tally.observed(model, figures.original, figures.would_send, costs, prices))

    def offer(self, model: str, prices: Prices, work: Callable[[], Awaitable[Figures]]) -> str:
        """Queue ``work`` (the would-have preparation) to run after this request's response:
        ``sampled``; or, with the queue full, ``skipped``."""
        if self.held >= self.size or time.monotonic() < self.resume_at:
            self.metrics.shadow_skipped.labels(model).inc()
            return SKIPPED
        self.held += 1
        after_response.defer(lambda: self._queued().put_nowait((model, prices, work)))
        return SAMPLED

    def _queued(self) -> asyncio.Queue[tuple[str, Prices, Callable[[], Awaitable[Figures]]]]:
        if self._queue is None:
            self._queue = asyncio.Queue()  # never longer than ``size``: places are taken in ``offer``
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._consume(self._queue))
        return self._queue

    async def _consume(self, queue: asyncio.Queue[tuple[str, Prices, Callable[[], Awaitable[Figures]]]]
                       ) -> None:
        while True:  # one at a time: the shadow never takes more than one compression worker
            model, prices, work = await queue.get()
            if (wait := self.resume_at - time.monotonic()) > 0:  # this share of the time is used up
                await asyncio.sleep(wait)
            started = time.monotonic()
            try:
                self.record(model, await work(), prices, "computed")
            except GatewayError as exc:  # compressing would have refused it (too long), or was overloaded
                self.metrics.shadow_requests.labels(model, "refused").inc()
                log.info("shadow model=%s: compress mode would have answered %s", model, exc.status_code)
            except Exception as exc:
                self.metrics.shadow_requests.labels(model, "failed").inc()
                log.warning("shadow model=%s failed (%s)", model, type(exc).__name__)
                log.debug("traceback", exc_info=exc)
            finally:
                self.held -= 1
                self._pause(time.monotonic() - started)

    def _pause(self, took: float) -> None:
        """No work for as long as keeps the work's time within ``share`` of the whole."""
        self.resume_at = time.monotonic() + took * (1 - self.share) / self.share

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
