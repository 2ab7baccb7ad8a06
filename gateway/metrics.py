"""Prometheus metrics, one registry per app so that several apps (tests) never collide.

Request counting lives in a pure ASGI middleware: it sees every response, errors included,
and never buffers a streamed body.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from gateway.stats.record import Record

log = logging.getLogger("gateway.metrics")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
                   Awaitable[None]]

COMPRESSION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        # Where the operator's stats go (gateway.stats.recorder: a queue, never a write on the
        # request path), set by the app; None in the LiteLLM plug-in and in tests of other parts.
        self.stats: Callable[[Record], None] | None = None
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("mixpr_requests", "HTTP requests handled", ["path", "status"], registry=r)
        self.request_seconds = Histogram("mixpr_request_seconds", "Time to the response's first byte",
                                         ["path"], registry=r)
        self.chat = Counter("mixpr_chat_requests", "Chat completions by model and action",
                            ["model", "action"], registry=r)
        self.compressed = Counter("mixpr_compressed_requests", "Chat completions that were compressed",
                                  ["model", "route"], registry=r)
        self.tokens_in = Counter("mixpr_prompt_tokens_in", "Prompt tokens received from clients",
                                 ["model"], registry=r)
        self.tokens_out = Counter("mixpr_prompt_tokens_out", "Prompt tokens forwarded upstream",
                                  ["model"], registry=r)
        self.tokens_saved = Counter("mixpr_prompt_tokens_saved", "Prompt tokens removed by compression",
                                    ["model"], registry=r)
        self.compression_seconds = Histogram("mixpr_compression_seconds", "Time spent compressing a prompt",
                                             ["model"], buckets=COMPRESSION_BUCKETS, registry=r)
        self.managed_restarts = Counter("mixpr_managed_server_restarts",
                                        "Relaunches of a managed model server after its process exited",
                                        ["model"], registry=r)
        self.worker_restarts = Counter("mixpr_compression_worker_restarts",
                                       "Compression workers replaced, by why (crash, timeout)",
                                       ["reason"], registry=r)
        self.workers_live = Gauge("mixpr_compression_workers_live", "Compression workers able to take a "
                                  "job now (fewer than configured while some restart)", registry=r)
        self.compression_failures = Counter("mixpr_compression_failures",
                                            "Compressions that failed, by cause (crash, timeout, "
                                            "unavailable, error)", ["cause"], registry=r)
        self.unexpected_errors = Counter("mixpr_unexpected_errors", "Exceptions nothing handled (bugs), "
                                         "answered 500 or, once streaming, a cut connection",
                                         ["path"], registry=r)
        self.shed = Counter("mixpr_requests_shed", "Requests refused by admission control, by limit "
                            "(compression_queue, body_bytes)", ["limit"], registry=r)
        self.self_route = Counter("mixpr_self_route_requests", "Self-routed requests by outcome "
                                  "(answered from the compressed prompt, or escalated)",
                                  ["model", "outcome"], registry=r)
        self.prefix_turns = Counter("mixpr_prefix_turns", "Requests of multi-turn conversations by what "
                                    "was sent: passthrough, compressed (nothing reused), appended (the "
                                    "previous request's bytes, then the new messages), reset",
                                    ["model", "outcome"], registry=r)
        self.prefix_reused_tokens = Counter("mixpr_prefix_reused_tokens", "Prompt tokens sent exactly as in "
                                            "the conversation's previous request", ["model"], registry=r)
        self.cache_turns = Counter("mixpr_cache_turns", "Multi-turn requests by whether the provider's "
                                   "cache still held the conversation's prefix (cold: sent longer ago "
                                   "than the model's cache lifetime; gateway.conversation.warmth)",
                                   ["model", "state"], registry=r)
        self.resets = Counter("mixpr_resets", "Multi-turn requests with a reset since the previous "
                              "request (their older messages compressed harder: one cache miss)",
                              ["model"], registry=r)
        self.reset_saving = Counter("mixpr_reset_saving", "Resets' saving in input tokens' worth: expected "
                                    "(over the turns to come, less the cache write, when made) and "
                                    "realised (cache reads each later request saves)", ["model", "kind"],
                                    registry=r)
        self.new_forms = Counter("mixpr_message_forms", "Message forms computed (found neither in the "
                                 "instance's cache nor in the replicas' shared one)", ["model"], registry=r)
        self.form_cache = Counter("mixpr_form_cache", "Message forms (with evidence blocks and token "
                                  "counts) a build needed, by where they came from: local (this "
                                  "instance's memory), redis (the shared cache), computed",
                                  ["source"], registry=r)
        self.form_cache_errors = Counter("mixpr_form_cache_errors", "Failures of the shared form cache "
                                         "(Redis), by cause (unavailable, timeout, full, error, dropped); "
                                         "the request went on with local work", ["cause"], registry=r)
        self.form_cache_rejected = Counter("mixpr_form_cache_rejected", "Shared form cache (Redis) entries "
                                           "dropped because their signature did not check (written by "
                                           "another deployment, changed, or moved); the form was computed "
                                           "here", registry=r)
        self.form_cache_pending_writes = Gauge("mixpr_form_cache_pending_writes", "Write-backs to the "
                                               "shared form cache (Redis) in flight", registry=r)
        self.upstream_cached_tokens = Counter("mixpr_upstream_cached_tokens", "Prompt tokens the upstream "
                                              "reported read from (or written to) its prompt cache",
                                              ["model", "kind"], registry=r)
        self.guardrail_failed_open = Counter("mixpr_guardrail_failed_open", "LiteLLM plug-in requests "
                                             "forwarded as they came because compressing failed, by cause",
                                             ["cause"], registry=r)
        self.guardrail_kept_whole = Counter("mixpr_guardrail_kept_whole", "Messages the LiteLLM plug-in sent "
                                            "whole because LiteLLM cannot write their text back in place",
                                            ["reason"], registry=r)
        self.replies_lowered = Counter("mixpr_replies_lowered", "Chat requests whose max_tokens was lowered "
                                       "because it left the prompt no room (x-mixpr-max-tokens)", ["model"],
                                       registry=r)
        self.upstream_calls = Counter("mixpr_upstream_calls", "Chat calls forwarded upstream, by how: "
                                      "relay (the request's bytes, gateway.upstream.chat_relay) or litellm",
                                      ["model", "via"], registry=r)
        self.escalation_tokens = Counter("mixpr_self_route_escalation_tokens",
                                         "Prompt tokens sent upstream by Self-Route escalations",
                                         ["model", "escalated_to"], registry=r)
        # Long-context price tiers (gateway.core.tiers): requests by the tier they were billed at, and
        # what keeping requests under a tier's line saved, in input tokens' worth at the base price.
        self.price_tier_requests = Counter("mixpr_price_tier_requests", "Chat requests to models with a "
                                           "long-context price tier, by the tier they were billed at",
                                           ["model", "tier"], registry=r)
        self.price_tier_saved = Counter("mixpr_price_tier_saved", "What keeping requests under a price "
                                        "tier's line saved, in input tokens' worth at the base price",
                                        ["model"], registry=r)
        # Observe mode (gateway.core.shadow): what compressing would have sent, next to what was sent.
        self.shadow_requests = Counter("mixpr_shadow_requests", "Observe-mode requests by result: unchanged "
                                       "(compressing would send them as they are, known up front), computed "
                                       "(after the response), refused (compressing would have refused "
                                       "them), failed", ["model", "result"], registry=r)
        self.shadow_skipped = Counter("mixpr_shadow_skipped", "Observe-mode requests not computed because "
                                      "shadow_queue requests were waiting (the figures are a sample)",
                                      ["model"], registry=r)
        self.shadow_tokens = Counter("mixpr_shadow_tokens", "Observe mode: prompt tokens as sent (original) "
                                     "and as compressing would have sent them (would_send)",
                                     ["model", "kind"], registry=r)
        self.shadow_cached_tokens = Counter("mixpr_shadow_cached_tokens", "Observe mode: of those, tokens "
                                            "the provider's prefix cache would serve (the previous turn)",
                                            ["model", "kind"], registry=r)
        self.shadow_cost = Counter("mixpr_shadow_cost", "Observe mode: the prompts' price, cache reads and "
                                   "writes included, as sent (original) and as compressing would have sent "
                                   "them (would_send); the saving is the difference. prices: litellm (the "
                                   "model's own, in its currency) or default (input-token units)",
                                   ["model", "kind", "prices"], registry=r)

    def record_chat(self, model: str, action: str, original: int, final: int, route: str | None,
                    compress_ms: float | None) -> None:
        self.chat.labels(model, action).inc()
        self.tokens_in.labels(model).inc(original)
        self.tokens_out.labels(model).inc(final)
        if action == "compressed":
            self.compressed.labels(model, route or "unknown").inc()
            self.tokens_saved.labels(model).inc(max(original - final, 0))
            self.compression_seconds.labels(model).observe((compress_ms or 0.0) / 1000)

    def record_prefix(self, model: str, outcome: Any) -> None:
        """One request of a multi-turn conversation (``gateway.conversation.history``)."""
        self.new_forms.labels(model).inc(outcome.new_forms)
        if outcome.cache:
            self.cache_turns.labels(model, outcome.cache).inc()
        if outcome.reset:
            self.resets.labels(model).inc()
            kind = "reset"
        elif outcome.action == "passthrough":
            kind = "passthrough"
        else:
            kind = "appended" if outcome.reused_tokens else "compressed"
        self.prefix_turns.labels(model, kind).inc()
        self.prefix_reused_tokens.labels(model).inc(outcome.reused_tokens)
        if outcome.reset_saving is not None:
            expected, realised = outcome.reset_saving
            self.reset_saving.labels(model, "expected").inc(max(0.0, expected))
            self.reset_saving.labels(model, "realised").inc(realised)

    def record_usage(self, model: str, usage: dict[str, Any] | None) -> None:
        """The upstream's prompt-cache accounting, OpenAI's or Anthropic's names. A usage the upstream
        sent in another shape (``"n/a"``, a figure that is no count, a negative one) is logged and not
        counted: the answer was billed, so it must still reach the client, never become a 500."""
        try:
            read, written = cached_tokens(usage)
        except (TypeError, ValueError, AttributeError):
            read = written = -1
        if read < 0 or written < 0:
            log.warning("the upstream's usage for %s is not in a shape the metrics read; not counted", model)
            return
        if read:
            self.upstream_cached_tokens.labels(model, "read").inc(read)
        if written:
            self.upstream_cached_tokens.labels(model, "written").inc(written)
        if self.stats is not None and (read or written):  # the operator's page, beside the same counters
            from gateway.stats.record import Record  # only with a page: the plug-in never loads it

            counts = {"provider_cache_read_tokens": float(read),
                      "provider_cache_written_tokens": float(written)}
            self.stats(Record(at=time.time(), model=model, counts=counts))

    def record_self_route(self, model: str, outcome: str, escalated_to: str | None = None,
                          tokens: int = 0) -> None:
        self.self_route.labels(model, outcome).inc()
        if escalated_to is not None:
            self.escalation_tokens.labels(model, escalated_to).inc(tokens)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def cached_tokens(usage: dict[str, Any] | None) -> tuple[int, int]:
    """(read, written) prompt-cache tokens of a usage object: OpenAI's ``prompt_tokens_details`` (the
    Responses API's ``input_tokens_details``) or Anthropic's ``cache_read_input_tokens`` /
    ``cache_creation_input_tokens`` (LiteLLM keeps both). With Anthropic's ``iterations`` (server-side
    compaction sampled first), the top-level figures are the last iteration's alone: every iteration
    is billed, so every one is counted."""
    usage = usage or {}
    iterations = usage.get("iterations")
    if isinstance(iterations, list) and iterations:
        counted = [cached_tokens(i) for i in iterations if isinstance(i, dict)]
        return sum(r for r, _ in counted), sum(w for _, w in counted)
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    read = details.get("cached_tokens") or usage.get("cache_read_input_tokens") or 0
    written = usage.get("cache_creation_input_tokens") or 0
    return int(read), int(written)


class MetricsMiddleware:
    """Counts every HTTP response by route path and status (pure ASGI: streaming stays streaming)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        # Label by known paths only: raw paths from scanners would explode the label set.
        path = path_label(scope["path"])

        async def send_and_count(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(path, str(message["status"])).inc()
                self.metrics.request_seconds.labels(path).observe(time.perf_counter() - started)
            await send(message)

        await self.app(scope, receive, send_and_count)


KNOWN_PATHS = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/models", "/models",
                         "/health/liveliness", "/health/readiness", "/metrics",
                         "/v1/embeddings", "/embeddings", "/v1/completions", "/completions",
                         "/v1/responses", "/responses", "/v1/messages", "/messages"})
MODEL_PREFIXES = ("/v1/models/", "/models/")


def path_label(path: str) -> str:
    """The path itself when known; one label for every model retrieved; "other" for the rest."""
    if path in KNOWN_PATHS:
        return path
    for prefix in MODEL_PREFIXES:
        if path.startswith(prefix):
            return prefix + "{model}"
    return "other"
