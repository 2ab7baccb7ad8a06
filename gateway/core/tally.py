"""What a request adds to the operator's stats (``gateway.stats``), from what the metrics already
count: the decision's numbers and labels, priced at the model's prices (``gateway.prices``), never
a prompt's text. Money is counted for models with a price only; the others count in tokens."""

from __future__ import annotations

import time

from gateway.compress.compressor import Outcome
from gateway.prices import Prices
from gateway.stats.record import Record, Row


def chat(model: str, outcome: Outcome, prices: Prices, *, at: float | None = None) -> Record:
    """One chat request as prepared (``Preparer._record``: the same call that counts it in Prometheus)."""
    at = time.time() if at is None else at
    priced = prices.source == "litellm"
    counts = {"requests": 1.0, f"requests_{outcome.action}": 1.0,
              "failed_open": float(outcome.failed_open),
              "tokens_before": float(outcome.original_tokens), "tokens_after": float(outcome.final_tokens),
              "priced_requests": float(priced), "priced_tokens_before": outcome.original_tokens * priced,
              **_saving(outcome, prices, priced), **_conversation(outcome, prices, priced)}
    row = Row(at=at, model=model, route=outcome.route or "none", action=outcome.action,
              tokens_before=outcome.original_tokens, tokens_after=outcome.final_tokens,
              reset=outcome.reset, cache=outcome.cache or "", prices=prices.source)
    return Record(at=at, model=model, counts=counts, row=row)


def _saving(outcome: Outcome, prices: Prices, priced: bool) -> dict[str, float]:
    """Tokens compression removed, and their price. On a warm turn the client's own bytes would
    mostly have been cache reads, so the removed tokens are priced as reads there, not at the input
    price: pricing them at list input is how savings get overstated (issue 58)."""
    if outcome.action != "compressed":
        return {}
    removed = max(outcome.original_tokens - outcome.final_tokens, 0)
    price = prices.cache_read if outcome.cache == "warm" else prices.input
    return {"tokens_saved": float(removed), "saved_compression": removed * price * priced}


def _conversation(outcome: Outcome, prices: Prices, priced: bool) -> dict[str, float]:
    """Warm or cold, and a reset's cost: the span it rewrote is written to the provider's cache
    where the turn would otherwise have read it."""
    counts = {"reused_tokens": float(outcome.reused_tokens) if outcome.action != "passthrough" else 0.0}
    if outcome.cache:
        counts[f"{outcome.cache}_turns"] = 1.0
    if outcome.reset:
        written = max(outcome.final_tokens - outcome.reused_tokens, 0)
        counts.update(resets=1.0, reset_written_tokens=float(written),
                      reset_write_cost=written * (prices.cache_write - prices.cache_read) * priced)
    return counts


def observed(model: str, original: int, would_send: int, costs: tuple[float, float], prices: Prices,
             *, at: float | None = None) -> Record:
    """Observe mode's would-have figures for one request (``Shadow.record``), with its ``costs``
    (client's bytes, gateway's bytes) priced as it prices them: the cache's reads and writes on both
    sides."""
    priced = prices.source == "litellm"
    counts = {"observe_requests": 1.0, "observe_tokens_original": float(original),
              "observe_tokens_would_send": float(would_send),
              "observe_cost_original": costs[0] * priced, "observe_cost_would_send": costs[1] * priced}
    return Record(at=time.time() if at is None else at, model=model, counts=counts)


def escalated(model: str, tokens: int, prices: Prices, *, at: float | None = None) -> Record:
    """A Self-Route escalation of a ``model`` request: ``tokens`` sent again to the fallback, at the
    fallback's input price (``prices``), on top of the compressed ask already counted. A cost of
    compressing: the page's net saving is after it."""
    priced = prices.source == "litellm"
    counts = {"escalations": 1.0, "escalation_tokens": float(tokens),
              "escalation_cost": tokens * prices.input * priced}
    return Record(at=time.time() if at is None else at, model=model, counts=counts)
