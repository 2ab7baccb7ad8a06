"""One chat call, whatever API it came in on: compress it when needed, forward it, report it.

Every wire format (``gateway.api``) turns its request into a :class:`ChatCall` (OpenAI chat
messages plus parameters) and turns the :class:`ChatReply` back into its own shape, so trigger,
budget, routing, headers and metrics behave the same on every endpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.compress.compressor import Compressor, Outcome, Router
from gateway.compress.policy import Control, Target
from gateway.compress.prefix import Prefixes, Request
from gateway.config import GatewayConfig, MixprSettings, ModelEntry, max_input_tokens
from gateway.core import model_tokens, self_route
from gateway.errors import ModelNotFound, ModelUnavailable, UpstreamError
from gateway.metrics import Metrics
from gateway.upstream import chat_relay
from gateway.upstream import forward as upstream

log = logging.getLogger("gateway.core.chat")

ROUTER_MAX_TOKENS = 2  # "y" or "n", with room for a tokenizer that splits off a leading space
CALIBRATIONS = 3  # times a request is prepared again after its model's server counted it over the window


@dataclass(frozen=True)
class ChatCall:
    """A chat completion request in the gateway's own terms (OpenAI chat messages)."""

    model: str  # a model_name from model_list
    messages: list[dict[str, Any]]
    params: dict[str, Any] = field(default_factory=dict)  # every other OpenAI chat parameter
    control: Control = Control()
    stream: bool = False
    # How the messages prepared for the upstream become the ones sent, when ``messages`` is a view
    # of a richer request (Anthropic blocks: ``gateway.api.anthropic_blocks``); None: as they are.
    wire: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None
    raw_reply: bool = False  # the API sends an OpenAI chat answer as is, so may get it as bytes (relay)


@dataclass(frozen=True)
class ChatReply:
    """The upstream's answer: a chat.completion dict, or chat.completion.chunk dicts when streaming."""

    outcome: Outcome
    headers: dict[str, str]
    response: dict[str, Any] | None = None
    chunks: AsyncIterator[dict[str, Any]] | None = None
    # From the raw relay (``gateway.upstream.chat_relay``), for a call with ``raw_reply``: the upstream's
    # chat.completion JSON, or its SSE events (whole events per item, ``data: [DONE]`` included).
    body: bytes | None = None
    events: AsyncIterator[bytes] | None = None


@dataclass
class ChatService:
    config: GatewayConfig
    compressor: Compressor
    metrics: Metrics
    managed: dict[str, Any] = field(default_factory=dict)  # model_name -> its ManagedServer
    counters: dict[str, model_tokens.ServerCounter] = field(init=False)  # exact counts, by model_name

    def __post_init__(self) -> None:
        default = self.config.general_settings.default_max_input_tokens
        # Looked up once: LiteLLM's model map is a large dict, and windows do not change.
        self.windows = {m.model_name: max_input_tokens(m, default) for m in self.config.model_list}
        self.settings = {m.model_name: m.settings(self.config.mixpr_settings) for m in self.config.model_list}
        self.scales = {m.model_name: 1 + model_tokens.margin(m, self.settings[m.model_name])
                       for m in self.config.model_list}
        self.counters = model_tokens.server_counters(self.config.model_list)
        self.entries = {m.model_name: m for m in self.config.model_list}
        general = self.config.general_settings
        self.relay = chat_relay.Relay.for_models(self.config.model_list, timeout=general.request_timeout_s,
                                                 enabled=general.raw_relay)
        self.routers = {m.model_name: self._router(m.model_name) for m in self.config.model_list}
        self.prefixes = Prefixes(self.compressor, cache_bytes=self.config.general_settings.prefix_cache_bytes,
                                 metrics=self.metrics)

    async def aclose(self) -> None:
        for counter in self.counters.values():
            await counter.aclose()
        await self.relay.aclose()

    def entry(self, model: str) -> ModelEntry:
        entry = self.entries.get(model)
        if entry is None:
            raise ModelNotFound(f"The model `{model}` does not exist on this gateway.", param="model")
        return entry

    async def run(self, call: ChatCall) -> ChatReply:
        outcome = await self.prepare(call)
        entry = self.entry(call.model)
        settings = self.settings[entry.model_name]
        try:
            plan = None
            if self_route.eligible(call.params, settings) and outcome.action == "compressed":
                plan = self_route.escalation(entry.model_name, settings, outcome, call.control)
            if plan is None:  # not compressed, or nothing larger to escalate to: ask as usual
                return await self._forward(entry, call, outcome)
            return await self._self_routed(entry, call, outcome, plan)
        except UpstreamError as exc:
            # A local server refusing connections has died, even if its exit is not reaped yet.
            if exc.code == "upstream_connection_error" and entry.model_name in self.managed:
                self.check_available(entry.model_name, lost=True)
            raise

    async def prepare(self, call: ChatCall) -> Outcome:
        """What is sent upstream for ``call``: the trigger, budget, query span, router, the
        conversation's prefix (``gateway.compress.prefix``) and failing open decided here, once, for every API
        and for the LiteLLM guardrail (which sends nothing)."""
        started = time.perf_counter()
        entry = self.entry(call.model)
        self.check_available(entry.model_name)
        settings = self.settings[entry.model_name]
        # Room for the Self-Route instruction that ``run`` may append after compression.
        added = self_route.INSTRUCTION_TOKENS if self_route.eligible(call.params, settings) else 0
        outcome = await self._prepare(entry, call, settings, call.control, added, prefix=True)
        self._record(entry.model_name, outcome, started)
        return outcome

    def check_available(self, model_name: str, *, lost: bool = False) -> None:
        """Raise 503 + Retry-After while the model's managed server is not answering."""
        server = self.managed.get(model_name)
        if server is None or (server.ready and not lost):
            return
        problem = server.problem or "managed server stopped answering"
        retry = server.retry_after
        raise ModelUnavailable(f"The model `{model_name}` is unavailable right now ({problem}); "
                               f"retry in {retry} s.", retry_after=retry)

    async def _prepare(self, entry: ModelEntry, call: ChatCall, settings: MixprSettings, control: Control,
                       added: int = 0, *, prefix: bool = False, more_evidence: bool = False) -> Outcome:
        """``prefix``: keep the bytes sent for the conversation's earlier turns (escalations do not:
        they ask about the whole conversation afresh)."""
        name = entry.model_name
        target = Target(entry.upstream_model, self.windows[name], _reserve(call.params, settings),
                        _reserve_param(call.params), added, self.scales[name])
        more = self_route.RETRY_EVIDENCE_FACTOR if more_evidence else 1.0
        request = Request(call.messages, call.params.get("tools"), target, settings, control,
                          self.routers.get(settings.router_model or name), more)
        outcome = await self._decide(request, name, prefix)
        counter = self.counters.get(name)
        if counter is None or control.enabled is False:
            return outcome
        return await self._counted(counter, request, name, prefix, outcome)

    async def _decide(self, request: Request, name: str, prefix: bool) -> Outcome:
        if prefix:
            return await self.prefixes.prepare(request, name)
        return await self.prefixes.today(request)

    async def _counted(self, counter: model_tokens.ServerCounter, request: Request, name: str,
                       prefix: bool, outcome: Outcome) -> Outcome:
        """``outcome`` as the model's own server counts it; prepared again at the scale that count
        implies while it does not fit (the estimate's margin was too small for this text)."""
        for _ in range(CALIBRATIONS):
            exact = await counter.count(outcome.messages, request.tools)
            if exact is None:  # the server could not count: the estimate stands
                return outcome
            if exact <= request.target.limit:
                original = exact if outcome.action == "passthrough" else outcome.original_tokens
                return replace(outcome, original_tokens=original, final_tokens=exact)
            scale = model_tokens.calibrated(request.target.scale, outcome.final_tokens, exact)
            request = replace(request, target=replace(request.target, scale=scale))
            outcome = await self._decide(request, name, prefix)
        return outcome  # still over: the upstream's own refusal reaches the client

    async def _self_routed(self, entry: ModelEntry, call: ChatCall, outcome: Outcome,
                           plan: self_route.Escalation) -> ChatReply:
        """Ask with the instruction; on "unanswerable", escalate once (see ``gateway.core.self_route``).

        Streaming holds back only the first chunks, until they can no longer spell "unanswerable",
        and before the response starts: so the self-route headers, sent first, are always true.
        """
        name = entry.model_name
        reply, unanswerable = await self._ask(entry, call, outcome)
        if unanswerable and outcome.reused_tokens and not outcome.reset:
            richer = await self._prepare(entry, call, self.settings[name], call.control,
                                         self_route.INSTRUCTION_TOKENS, prefix=True, more_evidence=True)
            if not richer.reset and richer.messages != outcome.messages:
                reply, unanswerable = await self._ask(entry, call, richer)
                if not unanswerable:
                    self.metrics.record_self_route(name, self_route.EVIDENCE)
                    headers = {**reply.headers, "x-mixpr-self-route": self_route.EVIDENCE}
                    return replace(reply, headers=headers)
        if unanswerable:
            return await self._escalate(entry, call, plan)
        self.metrics.record_self_route(name, self_route.ANSWERED)
        return replace(reply, headers={**reply.headers, "x-mixpr-self-route": self_route.ANSWERED})

    async def _ask(self, entry: ModelEntry, call: ChatCall, outcome: Outcome) -> tuple[ChatReply, bool]:
        """The reply to ``outcome`` with the Self-Route instruction, and whether it was "unanswerable"
        (then any stream is closed and nothing of it sent)."""
        asked = replace(outcome, messages=self_route.with_instruction(outcome.messages))
        reply = await self._forward(entry, call, asked)
        if reply.chunks is None:
            return reply, self_route.is_unanswerable(_reply_text(reply.response))
        unanswerable, chunks = await self_route.hold_back(reply.chunks)
        return replace(reply, chunks=chunks), unanswerable

    async def _escalate(self, entry: ModelEntry, call: ChatCall, plan: self_route.Escalation) -> ChatReply:
        target = self.entry(plan.model)
        settings = self.settings[plan.model]
        if plan.fit_window:
            settings = settings.model_copy(update={"compress_above_tokens": None})
        outcome = await self._prepare(target, call, settings, plan.control)
        name = entry.model_name
        self.metrics.record_self_route(name, self_route.ESCALATED, plan.model, outcome.final_tokens)
        log.info("self-route escalated model=%s to=%s action=%s tokens=%d->%d", name, plan.model,
                 outcome.action, outcome.original_tokens, outcome.final_tokens)
        reply = await self._forward(target, call, outcome)
        return replace(reply, headers={**reply.headers, "x-mixpr-self-route": self_route.ESCALATED,
                                       "x-mixpr-escalated-to": plan.model})

    async def prepare_prompt(
        self, model: str, prompt: str, params: dict[str, Any], control: Control
    ) -> tuple[ModelEntry, str, Outcome]:
        """A legacy completion's prompt, compressed as one user message would be (its tail is the query)."""
        outcome = await self.prepare(ChatCall(model, [{"role": "user", "content": prompt}], params, control))
        return self.entry(model), outcome.messages[0]["content"], outcome

    def _record(self, model: str, outcome: Outcome, started: float) -> None:
        self.metrics.record_chat(model, outcome.action, outcome.original_tokens, outcome.final_tokens,
                                 outcome.route, outcome.compress_ms)
        log.info("chat model=%s action=%s tokens=%d->%d route=%s compress_ms=%s gateway_ms=%.1f",
                 model, outcome.action, outcome.original_tokens, outcome.final_tokens,
                 outcome.route, _ms(outcome.compress_ms), (time.perf_counter() - started) * 1000)

    async def _forward(self, entry: ModelEntry, call: ChatCall, outcome: Outcome) -> ChatReply:
        headers = report_headers(outcome)
        route = self.relay.routes.get(entry.model_name) if call.raw_reply and call.wire is None else None
        if route is not None and outcome.action == "passthrough":  # issue 23: no LiteLLM on the way
            return await self._relayed(route, entry.model_name, call, outcome, headers)
        self.metrics.upstream_calls.labels(entry.model_name, "litellm").inc()
        timeout = self.config.general_settings.request_timeout_s
        messages = call.wire(outcome.messages) if call.wire is not None else outcome.messages
        kwargs = upstream.build_call(entry, call.params, messages, timeout=timeout)
        if call.stream:
            stream = await upstream.open_stream(kwargs)
            chunks = self._metered(entry.model_name, upstream.stream_chunks(stream))
            return ChatReply(outcome, headers, chunks=chunks)
        response = await upstream.complete(kwargs)
        self.metrics.record_usage(entry.model_name, response.get("usage"))
        return ChatReply(outcome, headers, response=response)

    async def _relayed(self, route: chat_relay.Route, model: str, call: ChatCall, outcome: Outcome,
                       headers: dict[str, str]) -> ChatReply:
        """The passthrough as bytes to an OpenAI-compatible upstream (``gateway.upstream.chat_relay``)."""
        self.metrics.upstream_calls.labels(model, "relay").inc()
        content = chat_relay.body(route, outcome.messages, call.params, stream=call.stream)
        if call.stream:
            def on_usage(usage: dict[str, Any]) -> None:
                self.metrics.record_usage(model, usage)

            events = await self.relay.open_stream(route, content, on_usage)
            return ChatReply(outcome, headers, events=events)
        answer, usage = await self.relay.complete(route, content)
        self.metrics.record_usage(model, usage)
        return ChatReply(outcome, headers, body=answer)

    async def _metered(self, model: str, chunks: AsyncIterator[dict[str, Any]]
                       ) -> AsyncIterator[dict[str, Any]]:
        """The chunks unchanged; the usage (in the last one, when asked for) counted in the metrics."""
        try:
            async for chunk in chunks:
                if chunk.get("usage"):
                    self.metrics.record_usage(model, chunk["usage"])
                yield chunk
        finally:  # the client left early: let the upstream stream go too
            await chunks.aclose()

    def _router(self, model_name: str) -> Router | None:
        """How workers ask ``model_name`` the auto router's question (deterministic, 2 tokens)."""
        entry = self.config.model(model_name)
        if entry is None:
            return None  # config validation names unknown router models; this is belt and braces
        timeout = self.settings[model_name].router_timeout_s
        params = {"max_tokens": ROUTER_MAX_TOKENS, "temperature": 0}
        kwargs = upstream.build_call(entry, params, [], timeout=timeout)
        del kwargs["messages"]
        return Router(name=model_name, kwargs=kwargs, timeout=timeout)


def _reserve(params: dict[str, Any], settings: Any) -> int:
    """Tokens kept free for the reply: what the client asked for, else the configured reserve."""
    asked = params.get("max_completion_tokens") or params.get("max_tokens")
    return int(asked) if asked else settings.completion_reserve_tokens


def _reserve_param(params: dict[str, Any]) -> str | None:
    """The request field that set the reserve, so that an error can name it."""
    return next((k for k in ("max_completion_tokens", "max_tokens") if params.get(k)), None)


def _reply_text(response: dict[str, Any] | None) -> str | None:
    choices = (response or {}).get("choices") or [{}]
    return (choices[0].get("message") or {}).get("content")


def report_headers(outcome: Outcome) -> dict[str, str]:
    return {
        "x-mixpr-action": outcome.action,
        "x-mixpr-original-tokens": str(outcome.original_tokens),
        "x-mixpr-compressed-tokens": str(outcome.final_tokens),
        "x-mixpr-route": outcome.route or "none",
        "x-mixpr-compress-ms": _ms(outcome.compress_ms),
        "x-mixpr-prefix-reused-tokens": str(outcome.reused_tokens),
        "x-mixpr-reset": "true" if outcome.reset else "false",
    }


def _ms(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "0"
