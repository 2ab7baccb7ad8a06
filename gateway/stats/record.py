"""What one request adds to the stats: additive figures by name, and one row of the per-request
record. Numbers and labels only: nothing here can hold a prompt's text or a key."""

from __future__ import annotations

from dataclasses import dataclass, field

# The additive figures, per model. Money is summed for priced traffic only (``priced_*``): a
# model without a price in the config or LiteLLM's cost map is counted in tokens, never in money
# at invented prices, and the page shows the share of traffic that had one.
FIELDS = (
    "requests", "requests_passthrough", "requests_compressed", "failed_open",
    "tokens_before", "tokens_after", "tokens_saved",
    "priced_requests", "priced_tokens_before",
    "saved_compression", "reset_write_cost", "escalations", "escalation_tokens", "escalation_cost",
    "resets", "reset_written_tokens", "warm_turns", "cold_turns", "reused_tokens",
    "provider_cache_read_tokens", "provider_cache_written_tokens",
    "observe_requests", "observe_tokens_original", "observe_tokens_would_send",
    "observe_cost_original", "observe_cost_would_send",
)
RING_FIELDS = ("at", "model", "route", "action", "tokens_before", "tokens_after", "reset", "cache", "prices")


@dataclass(frozen=True)
class Row:
    """One request's decision in the per-request record."""

    at: float  # unix seconds
    model: str  # the gateway's model name (the config's), never the upstream's
    route: str  # MixPR's route ("local", "global", ...) or "none"
    action: str  # passthrough | compressed
    tokens_before: int
    tokens_after: int
    reset: bool
    cache: str  # warm | cold | "" (a single request)
    prices: str  # litellm (the model has a price) | default (it has none: tokens only)

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in RING_FIELDS}


@dataclass(frozen=True)
class Record:
    """What one event adds: ``counts`` to the model's figures at ``at``, and ``row``, if any, to the
    per-request record."""

    at: float
    model: str
    counts: dict[str, float] = field(default_factory=dict)
    row: Row | None = None
