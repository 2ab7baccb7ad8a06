"""One chat call, whatever API it came in on: compress it when needed, forward it, report it.

Every wire format (``gateway.api``) turns its request into a :class:`ChatCall` (OpenAI chat
messages plus parameters) and turns the :class:`ChatReply` back into its own shape, so trigger,
budget, routing, headers and metrics behave the same on every endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from gateway.compress.compressor import Outcome
from gateway.compress.policy import Control
from gateway.config import ModelEntry
from gateway.core import cache_key, self_route, tally
from gateway.core import reply as replies
from gateway.core.prepare import ChatCall, Preparer, report_headers
from gateway.errors import UpstreamError
from gateway.run import offload
from gateway.upstream import chat_relay, http
from gateway.upstream import forward as upstream
from gateway.upstream.betas import Betas

__all__ = ["ChatCall", "ChatReply", "ChatService", "report_headers"]

log = logging.getLogger("gateway.core.chat")


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
    events: chat_relay.ChatEvents | None = None


@dataclass
class ChatService(Preparer):
    """A chat call prepared (``Preparer``), then forwarded, Self-Routed and reported."""

    def __post_init__(self) -> None:
        super().__post_init__()
        general = self.config.general_settings
        # The raw relays' one pooled client: chat to OpenAI-compatible upstreams, Messages to Anthropic.
        self.http = http.Client(http.Policy.from_env(max_connections=general.max_upstream_connections,
                                                     max_event_bytes=general.max_event_bytes))
        self.relay = chat_relay.Relay.for_models(self.config.model_list, self.http,
                                                 timeout=general.request_timeout_s, enabled=general.raw_relay)
        self.betas = Betas(general.anthropic_betas)  # the anthropic-beta flags clients may send upstream
        # Models whose requests get a prompt_cache_key per conversation when the client sent none.
        # Not in observe mode, whose requests go out exactly as the client sent them.
        self.cache_keyed = {e.model_name for e in self.config.model_list
                            if general.prompt_cache_key and upstream.is_openai(e.upstream_model)
                            and self.settings[e.model_name].mode != "observe"}
        self.cache_salt = cache_key.secret(general.master_key, general.deployment_secret)

    async def aclose(self) -> None:
        await super().aclose()
        await self.http.aclose()

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

    async def _self_routed(self, entry: ModelEntry, call: ChatCall, outcome: Outcome,
                           plan: self_route.Escalation) -> ChatReply:
        """Ask with the instruction; on "unanswerable", escalate once (see ``gateway.core.self_route``).

        Streaming holds back only the first chunks, until they can no longer spell "unanswerable",
        and before the response starts: so the self-route headers, sent first, are always true.
        """
        reply, unanswerable = await self._ask(entry, call, outcome)
        verdict = self_route.ANSWERED
        if unanswerable and outcome.reused_tokens and not outcome.reset:  # a follow-up: its history first
            reply, unanswerable = await self._ask_with_more_evidence(entry, call, outcome, reply)
            verdict = self_route.EVIDENCE
        if unanswerable:
            return await self._escalate(entry, call, plan)
        self.metrics.record_self_route(entry.model_name, verdict)
        return replace(reply, headers={**reply.headers, "x-mixpr-self-route": verdict})

    async def _ask_with_more_evidence(self, entry: ModelEntry, call: ChatCall, outcome: Outcome,
                                      reply: ChatReply) -> tuple[ChatReply, bool]:
        """Ask again with more evidence from what the history cut; still "unanswerable" when that
        would send the same bytes or reset the conversation (then escalating is the only step left)."""
        richer = await self.build(entry, call, self.settings[entry.model_name], call.control,
                                  self_route.INSTRUCTION_TOKENS, prefix=True, more_evidence=True)
        if richer.reset or richer.messages == outcome.messages:
            return reply, True
        return await self._ask(entry, call, richer)

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
        outcome = await self.build(target, call, settings, plan.control)
        name = entry.model_name
        self.metrics.record_self_route(name, self_route.ESCALATED, plan.model, outcome.final_tokens)
        if self.metrics.stats is not None:  # the operator's page (gateway.stats), beside the same counters
            self.metrics.stats(tally.escalated(name, outcome.final_tokens, self.prices[plan.model]))
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

    async def _forward(self, entry: ModelEntry, call: ChatCall, outcome: Outcome) -> ChatReply:
        call = self._cache_keyed(entry, call)
        headers = report_headers(outcome)
        route = self.relay.routes.get(entry.model_name) if call.raw_reply and call.wire is None else None
        if route is not None and outcome.action == "passthrough":  # issue 23: no LiteLLM on the way
            return await self._relayed(route, entry.model_name, call, outcome, headers)
        self.metrics.upstream_calls.labels(entry.model_name, "litellm").inc()
        timeout = self.config.general_settings.request_timeout_s
        messages = outcome.messages
        if call.wire is not None:  # a walk of every block: off the loop for a big request
            messages = await offload.inline_or_run(offload.many(messages), call.wire, messages)
        params = replies.forwarded(call.params, outcome.max_tokens)
        kwargs = upstream.build_call(entry, params, messages, timeout=timeout)
        if call.stream:
            stream = await upstream.open_stream(kwargs)
            chunks = self._metered(entry.model_name, call.model, upstream.stream_chunks(stream))
            return ChatReply(outcome, headers, chunks=chunks)
        response = await upstream.complete(kwargs)
        self.metrics.record_usage(entry.model_name, response.get("usage"))
        return ChatReply(outcome, headers, response={**response, "model": call.model})

    def _cache_keyed(self, entry: ModelEntry, call: ChatCall) -> ChatCall:
        """``call`` with the conversation's ``prompt_cache_key`` when the client sent none and the
        upstream is OpenAI-style (``gateway.core.cache_key``); the client's own key is left alone."""
        if entry.model_name not in self.cache_keyed or "prompt_cache_key" in call.params:
            return call
        found = cache_key.key(self.cache_salt, call.session, call.messages)
        return replace(call, params={**call.params, "prompt_cache_key": found})

    def router_kwargs(self, entry: ModelEntry, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The router question as ``build_call`` maps parameters for the deployment's provider."""
        kwargs = upstream.build_call(entry, params, [], timeout=timeout)
        del kwargs["messages"]
        return kwargs

    async def _relayed(self, route: chat_relay.Route, model: str, call: ChatCall, outcome: Outcome,
                       headers: dict[str, str]) -> ChatReply:
        """The passthrough as bytes to an OpenAI-compatible upstream (``gateway.upstream.chat_relay``)."""
        self.metrics.upstream_calls.labels(model, "relay").inc()
        params = replies.forwarded(call.params, outcome.max_tokens)
        content = chat_relay.body(route, outcome.messages, params, stream=call.stream)
        if call.stream:
            def on_usage(usage: dict[str, Any]) -> None:
                self.metrics.record_usage(model, usage)

            events = await self.relay.open_stream(route, content, call.model, on_usage)
            return ChatReply(outcome, headers, events=events)
        answer, usage = await self.relay.complete(route, content, call.model)
        self.metrics.record_usage(model, usage)
        return ChatReply(outcome, headers, body=answer)

    async def _metered(self, model: str, asked: str, chunks: AsyncIterator[dict[str, Any]]
                       ) -> AsyncIterator[dict[str, Any]]:
        """The chunks naming the model the client ``asked`` for; the usage (in the last one, when
        asked for) counted in the metrics."""
        try:
            async for chunk in chunks:
                if chunk.get("usage"):
                    self.metrics.record_usage(model, chunk["usage"])
                yield {**chunk, "model": asked}
        finally:  # the client left early: let the upstream stream go too
            await chunks.aclose()

def _reply_text(response: dict[str, Any] | None) -> str | None:
    choices = (response or {}).get("choices") or [{}]
    return (choices[0].get("message") or {}).get("content")
