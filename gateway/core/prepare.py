"""What is sent for one chat call: the trigger, budget, router, the conversation's prefix and the
model's own count, decided once for every API and for the LiteLLM plug-in (which forwards nothing).

This module never imports the forwarding layer (``gateway.upstream``): the plug-in runs inside a
LiteLLM proxy and must leave the host's LiteLLM exactly as it found it. Forwarding, Self-Route and
the reply are ``gateway.core.chat``'s, on top of :class:`Preparer`.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.compress.compressor import Compressor, Outcome, Router
from gateway.compress.policy import Control, Target, price_line
from gateway.config import (
    ROUTER_ONLY_PARAMS,
    GatewayConfig,
    MixprSettings,
    ModelEntry,
    max_input_tokens,
    max_output_tokens,
)
from gateway.conversation import shared_forms, warmth
from gateway.conversation.history import History, Request
from gateway.core import model_tokens, observe, reply, self_route, tally, tiers
from gateway.core.call import ChatCall, lowers
from gateway.core.shadow import Shadow
from gateway.errors import ContextLengthExceeded, ModelNotFound, ModelUnavailable
from gateway.metrics import Metrics
from gateway.prices import Prices, entry_prices
from gateway.run import offload
from mixpr.tokens import count_tokens, is_loaded

log = logging.getLogger("gateway.core.prepare")

ROUTER_MAX_TOKENS = 2  # "y" or "n", with room for a tokenizer that splits off a leading space
CONSTANT_INLINE_CHARS = 20_000  # a longer system prompt and tools are counted in a thread
CALIBRATIONS = 3  # times a request is prepared again after its model's server counted it over the window


@dataclass
class Preparer:
    """The compression side of a chat call, for every model of ``config``."""

    config: GatewayConfig
    compressor: Compressor
    metrics: Metrics
    managed: dict[str, Any] = field(default_factory=dict)  # model_name -> its ManagedServer
    # One message-form cache may serve several preparers (the plug-in's, one per model group).
    history: History | None = None
    counters: dict[str, model_tokens.ServerCounter] = field(init=False)  # exact counts, by model_name

    def __post_init__(self) -> None:
        default = self.config.general_settings.default_max_input_tokens
        # Looked up once: LiteLLM's model map is a large dict, and windows do not change.
        self.windows = {m.model_name: max_input_tokens(m, default) for m in self.config.model_list}
        self.outputs = {m.model_name: max_output_tokens(m) for m in self.config.model_list}
        self.settings = {m.model_name: m.settings(self.config.mixpr_settings) for m in self.config.model_list}
        self.scales = {m.model_name: 1 + model_tokens.margin(m, self.settings[m.model_name])
                       for m in self.config.model_list}
        self.counters = model_tokens.server_counters(self.config.model_list)
        self.entries = {m.model_name: m for m in self.config.model_list}
        # One price per model, for the reset gate (through each Target), observe mode and the reports.
        self.prices = {m.model_name: entry_prices(m) for m in self.config.model_list}
        # The price line each model's requests are kept under (gateway.compress.policy.price_line).
        self.lines = {name: price_line(self.prices[name], self.windows[name], self.settings[name])
                      for name in self.windows}
        general = self.config.general_settings  # observe mode's work, bounded in count and in time
        self.shadow = Shadow(general.shadow_queue, self.metrics, share=general.shadow_share)
        self.routers = {m.model_name: self._router(m.model_name) for m in self.config.model_list}
        if self.history is None:
            general = self.config.general_settings
            shared = shared_forms.from_settings(general, self.metrics)  # None without form_cache_url
            self.history = History(self.compressor, cache_bytes=general.prefix_cache_bytes,
                                   metrics=self.metrics, shared=shared)
        # Observe mode's would-have builds: the same forms, their own memory of what was "sent" (the
        # client's bytes, which observe mode sends, are not what compressing sent), no metrics.
        self.would = self.history.apart()

    async def aclose(self) -> None:
        for counter in self.counters.values():
            await counter.aclose()
        if self.history is not None:
            await self.history.aclose()
        await self.shadow.aclose()

    def entry(self, model: str) -> ModelEntry:
        entry = self.entries.get(model)
        if entry is None:
            raise ModelNotFound(f"The model `{model}` does not exist on this gateway.", param="model")
        return entry

    async def prepare(self, call: ChatCall) -> Outcome:
        """What is sent upstream for ``call``: the trigger, budget, query span, router, the
        messages' forms (``gateway.conversation.history``) and failing open decided here, once, for every API
        and for the LiteLLM guardrail (which sends nothing)."""
        started = time.perf_counter()
        entry = self.entry(call.model)
        self.check_available(entry.model_name)
        settings = self.settings[entry.model_name]
        if settings.mode == "observe":  # sent as it came; what compressing would do is only counted
            outcome = await observe.observe(self, entry, call, settings)
        else:
            # Room for the Self-Route instruction that ``run`` may append after compression.
            added = self_route.INSTRUCTION_TOKENS if self_route.eligible(call.params, settings) else 0
            outcome = await self.build(entry, call, settings, call.control, added, prefix=True)
        prices = self.call_prices(entry.model_name, call)
        outcome = self._priced(entry.model_name, prices, outcome)
        self._record(entry.model_name, prices, outcome, started)
        return outcome

    def call_prices(self, model: str, call: ChatCall) -> Prices:
        """``model``'s prices as ``call`` pays them: every cache write at the 1-hour price when the
        client asked for an hour (Anthropic bills it 2x input, not 1.25x)."""
        prices = self.prices[model]
        return prices.for_an_hour() if call.cache_hour else prices

    def _priced(self, model: str, prices: Prices, outcome: Outcome) -> Outcome:
        """``outcome`` with its price tier reported, and what keeping it under a line saved counted."""
        line, _ = self.lines[model]
        header = tiers.report(prices, line, outcome.original_tokens, outcome.final_tokens)
        if header is None:
            return outcome
        self.metrics.price_tier_requests.labels(model, tiers.billed(prices, outcome.final_tokens)).inc()
        self.metrics.price_tier_saved.labels(model).inc(
            tiers.saved(prices, line, outcome.original_tokens, outcome.final_tokens))
        return replace(outcome, tier=header)

    def check_available(self, model_name: str, *, lost: bool = False) -> None:
        """Raise 503 + Retry-After while the model's managed server is not answering."""
        server = self.managed.get(model_name)
        if server is None or (server.ready and not lost):
            return
        problem = server.problem or "managed server stopped answering"
        retry = server.retry_after
        raise ModelUnavailable(f"The model `{model_name}` is unavailable right now ({problem}); "
                               f"retry in {retry} s.", retry_after=retry)

    async def build(self, entry: ModelEntry, call: ChatCall, settings: MixprSettings, control: Control,
                    added: int = 0, *, prefix: bool = False, more_evidence: bool = False,
                    history: History | None = None) -> Outcome:
        """What is sent for ``call`` under ``control``. ``prefix``: keep the bytes sent for the
        conversation's earlier turns (escalations do not: they ask about the whole conversation
        afresh). ``history``: whose memory and metrics the build uses (observe mode's would-have
        builds: ``self.would``); this preparer's own by default. The reply's limit is lowered when it
        leaves the prompt no room (``gateway.core.reply``), to ``completion_reserve_tokens`` when even
        its ceiling leaves none."""
        asked = await self._reply(entry, call, settings, control, added)
        fit = functools.partial(self._fitted, entry, call, settings, control, added, prefix=prefix,
                                more_evidence=more_evidence, history=history or self.history)
        try:
            return await fit(asked)
        except ContextLengthExceeded:
            # Only when nothing can be sent beside that reply: the least one, for this request.
            least = asked.to(reply.least(call.params, settings.completion_reserve_tokens))
            if not lowers(call, control, asked) or least == asked:
                raise
            return await fit(least)

    async def _fitted(self, entry: ModelEntry, call: ChatCall, settings: MixprSettings, control: Control,
                      added: int, kept: reply.Reply, *, prefix: bool, more_evidence: bool,
                      history: History | None) -> Outcome:
        """What is sent with ``kept`` tokens left free for the reply."""
        name = entry.model_name
        line, margin = self.lines[name]
        target = Target(entry.upstream_model, self.windows[name], kept.tokens, kept.param, added,
                        self.scales[name], asked=kept.asked if kept.lowered else None,
                        prices=self.call_prices(name, call), line=line, line_margin=margin)
        more = self_route.RETRY_EVIDENCE_FACTOR if more_evidence else 1.0
        lifetime = warmth.lifetime(entry.upstream_model, settings.prefix.cache_lifetime_s, call.params,
                                   hour=call.cache_hour)
        request = Request(call.messages, call.params.get("tools"), target, settings, control,
                          self.routers.get(settings.router_model or name), more, call.conversation, lifetime)
        assert history is not None  # set in __post_init__
        outcome = await _decide(history, request, name, prefix)
        counter = self.counters.get(name)
        if counter is not None and control.enabled is not False:
            outcome = await _counted(history, counter, request, name, prefix, outcome)
        if kept.lowered:
            assert kept.asked is not None  # lowered implies asked
            outcome = replace(outcome, max_tokens=(kept.asked, kept.tokens))
        return outcome

    async def _reply(self, entry: ModelEntry, call: ChatCall, settings: MixprSettings, control: Control,
                     added: int) -> reply.Reply:
        """The reply the request asks for, lowered when it leaves the conversation's constant parts
        and the rest no useful room (``gateway.core.reply``): a function of the model, the config, the
        reply asked and those parts, never of whether the rest of this prompt fits."""
        name = entry.model_name
        asked = reply.asked(call.params, settings.completion_reserve_tokens)
        if not lowers(call, control, asked):
            return asked
        text = reply.constant_text(call.messages, call.params.get("tools"))
        # Counted here or in a thread, never in the pool: a count that cannot fail (none is 0). In a
        # thread too while the model's encoding is not loaded (``Compressor.count``).
        off_loop = len(text) > CONSTANT_INLINE_CHARS or not is_loaded(entry.upstream_model)
        counted = await offload.inline_or_run(off_loop, count_tokens, text, entry.upstream_model)
        constant = math.ceil(counted * self.scales[name]) + added
        top = reply.ceiling(self.windows[name], self.outputs[name], settings.completion_reserve_tokens)
        lowest = reply.least(call.params, settings.completion_reserve_tokens)
        return reply.kept(asked, self.windows[name], constant, top, lowest)

    def _record(self, model: str, prices: Prices, outcome: Outcome, started: float) -> None:
        self.metrics.record_chat(model, outcome.action, outcome.original_tokens, outcome.final_tokens,
                                 outcome.route, outcome.compress_ms)
        if self.metrics.stats is not None:  # the operator's page (gateway.stats), beside the same counters
            self.metrics.stats(tally.chat(model, outcome, prices, line=self.lines[model][0]))
        if outcome.max_tokens:
            self.metrics.replies_lowered.labels(model).inc()
        log.info("chat model=%s action=%s tokens=%d->%d route=%s compress_ms=%s gateway_ms=%.1f",
                 model, outcome.action, outcome.original_tokens, outcome.final_tokens,
                 outcome.route, _ms(outcome.compress_ms), (time.perf_counter() - started) * 1000)

    def _router(self, model_name: str) -> Router | None:
        """How workers ask ``model_name`` the auto router's question (deterministic, 2 tokens)."""
        entry = self.config.model(model_name)
        if entry is None:
            return None  # config validation names unknown router models; this is belt and braces
        timeout = self.settings[model_name].router_timeout_s
        params = {"max_tokens": ROUTER_MAX_TOKENS, "temperature": 0}
        return Router(name=model_name, kwargs=self.router_kwargs(entry, params, timeout), timeout=timeout)

    def router_kwargs(self, entry: ModelEntry, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """``litellm.completion`` keyword arguments for the router question, without messages: the
        deployment's own settings and ``params`` (the gateway's ``ChatService`` maps them per provider)."""
        kwargs = {k: v for k, v in entry.litellm_params.items() if k not in ROUTER_ONLY_PARAMS}
        kwargs.setdefault("timeout", timeout)
        kwargs.setdefault("max_retries", 0)
        return {**kwargs, **params}


def report_headers(outcome: Outcome) -> dict[str, str]:
    return {
        "x-mixpr-action": outcome.action,
        "x-mixpr-original-tokens": str(outcome.original_tokens),
        "x-mixpr-compressed-tokens": str(outcome.final_tokens),
        "x-mixpr-route": outcome.route or "none",
        "x-mixpr-compress-ms": _ms(outcome.compress_ms),
        "x-mixpr-prefix-reused-tokens": str(outcome.reused_tokens),
        "x-mixpr-prefix-basis": outcome.reuse_basis,
        "x-mixpr-new-forms": str(outcome.new_forms),
        "x-mixpr-resets": str(outcome.resets),
        "x-mixpr-reset": "true" if outcome.reset else "false",
        **({"x-mixpr-cache": outcome.cache} if outcome.cache else {}),
        **({tiers.HEADER: outcome.tier} if outcome.tier else {}),
        **_reset_saving(outcome.reset_saving),
        **reply.header(outcome.max_tokens),
        **dict(outcome.shadow),
    }


def _reset_saving(saving: tuple[float, float] | None) -> dict[str, str]:
    """``expected=E; realised=R``: input tokens' worth (``Outcome.reset_saving``), when there was a reset."""
    if saving is None:
        return {}
    return {"x-mixpr-reset-saving": f"expected={saving[0]:.0f}; realised={saving[1]:.0f}"}


async def _decide(history: History, request: Request, name: str, prefix: bool) -> Outcome:
    if prefix:
        return await history.prepare(request, name)
    return await history.today(request)


async def _counted(history: History, counter: model_tokens.ServerCounter, request: Request, name: str,
                   prefix: bool, outcome: Outcome) -> Outcome:
    """``outcome`` as the model's own server counts it; prepared again at the scale that count
    implies while it does not fit (the estimate's margin was too small for this text)."""
    for _ in range(CALIBRATIONS):
        exact = await counter.count(outcome.messages, request.tools)
        if exact is None or exact <= request.target.ceiling:  # under the price line too
            return _with_count(outcome, exact)
        request = _rescaled(request, outcome.final_tokens, exact)
        outcome = await _decide(history, request, name, prefix)
    return outcome  # still over: the upstream's own refusal reaches the client


def _with_count(outcome: Outcome, exact: int | None) -> Outcome:
    """``outcome`` reported in the server's exact count (None: it could not count, the estimate stands)."""
    if exact is None:
        return outcome
    original = exact if outcome.action == "passthrough" else outcome.original_tokens
    return replace(outcome, original_tokens=original, final_tokens=exact)


def _rescaled(request: Request, estimated: int, exact: int) -> Request:
    """``request`` at the model-tokens-per-tiktoken-token scale the server's count implies."""
    scale = model_tokens.calibrated(request.target.scale, estimated, exact)
    return replace(request, target=replace(request.target, scale=scale))


def _ms(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "0"
