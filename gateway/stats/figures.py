"""The figures ``/stats`` returns and ``/ui`` shows, computed in this one place from what the
store keeps, for a window: ``all`` (since the store began), ``1h`` or ``24h`` (to the minute)."""

from __future__ import annotations

import time
from typing import Any

from gateway.stats.batch import HOUR, Totals, bucket
from gateway.stats.record import FIELDS
from gateway.stats.store import Store

WINDOWS = {"all": None, "1h": HOUR, "24h": 24 * HOUR}
CHART_HOURS = {"all": 7 * 24, "1h": 24, "24h": 24}  # the chart's span: the last week, or day
RECENT = 50  # rows of the per-request record in a read

# Figures derived from the sums, each with why it is computed so.
DERIVED = ("net_saved", "observe_tokens_saved", "observe_saved", "priced_share")


def read(store: Store, window: str, *, now: float | None = None, recent: int = RECENT) -> dict[str, Any]:
    """Everything the page shows for ``window`` (a key of WINDOWS; the caller checked it)."""
    now = time.time() if now is None else now
    span = WINDOWS[window]
    start = None if span is None else now - span
    sums = store.totals() if start is None else store.since(start)
    chart_start = max(start or 0.0, now - CHART_HOURS[window] * HOUR)
    rows = [r for r in store.recent(recent) if start is None or float(r["at"]) >= start]  # type: ignore[arg-type]
    return {
        "window": window,
        "since": start,
        "generated_at": now,
        "totals": figures(_all_models(sums)),
        "models": {model: figures(names) for model, names in sorted(sums.items())},
        "hours": hours(store.hours(chart_start), bucket(chart_start, HOUR)),
        "chart": {"from": bucket(chart_start, HOUR), "to": bucket(now, HOUR)},  # the chart's hours
        "recent": rows,
    }


def figures(sums: dict[str, float]) -> dict[str, float | None]:
    """The sums (0 for a figure never counted: a count that did not happen is 0, not missing) and
    what follows from them. A share of no traffic is None, shown as such, never as 0 %."""
    out: dict[str, float | None] = {name: sums.get(name, 0.0) for name in FIELDS}
    # Net of the cache writes resets caused (a reset rewrites the cached prefix once, which the
    # turns after it repay) and of Self-Route's escalations (the prompt sent again to the fallback):
    # the page never claims the compression alone.
    out["net_saved"] = (out["saved_compression"] - out["reset_write_cost"]  # type: ignore[operator]
                        - out["escalation_cost"])
    out["observe_tokens_saved"] = out["observe_tokens_original"] - out["observe_tokens_would_send"]  # type: ignore[operator]
    out["observe_saved"] = out["observe_cost_original"] - out["observe_cost_would_send"]  # type: ignore[operator]
    requests = out["requests"] or 0.0
    out["priced_share"] = (out["priced_requests"] or 0.0) / requests if requests else None
    return out


def hours(by_hour: dict[int, Totals], first: int) -> list[dict[str, Any]]:
    """Per hour and model, the chart's figures, oldest first; hours without traffic left out."""
    return [{"hour": at, "model": model, "requests": names.get("requests", 0.0),
             "tokens_saved": names.get("tokens_saved", 0.0),
             "net_saved": names.get("saved_compression", 0.0) - names.get("reset_write_cost", 0.0)
             - names.get("escalation_cost", 0.0)}
            for at, sums in sorted(by_hour.items()) if at >= first
            for model, names in sorted(sums.items())]


def _all_models(sums: Totals) -> dict[str, float]:
    total: dict[str, float] = {}
    for names in sums.values():
        for name, value in names.items():
            total[name] = total.get(name, 0.0) + value
    return total
