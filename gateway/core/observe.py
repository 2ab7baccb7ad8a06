"""Observe mode's request path: the client's request as it came, and what compressing would do.

On the request path only what a request with compression off (``x-mixpr-enabled: false``) gets
anyway: the prompt counted and its messages remembered as sent; then a decision that costs a
comparison: a single question below the trigger would go out unchanged, so its figures are known
now (``x-mixpr-shadow: unchanged``). Anything else is offered to ``gateway.core.shadow``'s queue and
prepared there, after the response, in compress mode exactly (``Preparer.build``, the
conversation's forms and resets included), in the preparer's would-have history (``Preparer.would``):
the same forms, no metrics (a would-have turn is not a sent one) and a memory of its own, so that what
a turn would have repeated of the previous one is compared with what compressing would have sent for
it, never with the client's bytes (a skipped turn leaves the gateway's bytes unknown, recomputed as a
cold instance does).

The preparer is reached through :class:`Builder`, so this module does not import
``gateway.core.prepare`` (which imports it).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Protocol

from gateway.compress.compressor import Outcome
from gateway.compress.policy import Control, Target, threshold
from gateway.config import MixprSettings, ModelEntry
from gateway.conversation import resets
from gateway.conversation.history import History, Request
from gateway.core import model_tokens, reply, self_route, shadow
from gateway.core.call import ChatCall, lowers
from gateway.core.shadow import Figures, Shadow
from gateway.prices import Prices

OFF = Control(enabled=False)  # counted, never changed: what a request with compression off gets


class Builder(Protocol):
    """What observe mode uses of ``gateway.core.prepare.Preparer``."""

    windows: dict[str, int]
    outputs: dict[str, int | None]
    scales: dict[str, float]
    counters: dict[str, model_tokens.ServerCounter]
    lines: dict[str, tuple[int | None, int]]  # each model's price line and its margin
    shadow: Shadow
    history: History | None
    would: History

    async def build(self, entry: ModelEntry, call: ChatCall, settings: MixprSettings, control: Control,
                    added: int = 0, *, prefix: bool = False, more_evidence: bool = False,
                    history: History | None = None) -> Outcome: ...

    def call_prices(self, model: str, call: ChatCall) -> Prices: ...


async def observe(preparer: Builder, entry: ModelEntry, call: ChatCall, settings: MixprSettings) -> Outcome:
    """``call`` as the client sent it, with the ``x-mixpr-shadow*`` headers; the would-have figures
    recorded now when known, else after the response (or skipped, when the queue is full)."""
    # Exactly a compression-off request's preparation, so exactly its cost (the count, and the
    # messages remembered as sent, in a thread: without that hop a passthrough measured 2x slower at
    # 32 concurrent clients) and its bytes.
    sent = await preparer.build(entry, call, settings, OFF, prefix=True)
    name, tokens = entry.model_name, sent.original_tokens
    prices = preparer.call_prices(name, call)  # a 1-hour cache write at its own price
    if unchanged(preparer, entry, call, settings, tokens):
        preparer.shadow.record(name, Figures(tokens, tokens), prices)
        return replace(sent, shadow=shadow.unchanged_headers(tokens))
    work = functools.partial(would_have, preparer, entry, call, settings, tokens)
    return replace(sent, shadow=((shadow.HEADER, preparer.shadow.offer(name, prices, work)),))


async def as_sent(preparer: Builder, entry: ModelEntry, call: ChatCall, settings: MixprSettings) -> Outcome:
    """The messages as they came, counted as compress mode counts them, and not remembered (the
    client's previous turn, counted in the background)."""
    name = entry.model_name
    asked = reply.asked(call.params, settings.completion_reserve_tokens)
    target = Target(entry.upstream_model, preparer.windows[name], asked.tokens, asked.param,
                    scale=preparer.scales[name], prices=preparer.call_prices(name, call))
    assert preparer.history is not None  # set in __post_init__
    return await preparer.history.today(Request(call.messages, call.params.get("tools"), target,
                                                settings, OFF, None))


def unchanged(preparer: Builder, entry: ModelEntry, call: ChatCall, settings: MixprSettings,
              tokens: int) -> bool:
    """Whether compress mode would send ``call``'s prompt as it is, known from its count alone: one
    the client sent with compression off, or a single question (no earlier turn, so no message
    forms) at most the trigger, whose reply would not be lowered, for a model without an exact
    counter (which can make compress mode cut after all)."""
    name = entry.model_name
    if call.control.enabled is False:  # the client switched compression off for this request
        return True
    if any(m.get("role") == "assistant" for m in call.messages) or name in preparer.counters:
        return False
    asked = reply.asked(call.params, settings.completion_reserve_tokens)
    top = reply.ceiling(preparer.windows[name], preparer.outputs[name], settings.completion_reserve_tokens)
    if lowers(call, call.control, asked) and asked.tokens > top:
        return False  # compress mode might lower max_tokens: the prompt's bytes then need the full run
    added = self_route.INSTRUCTION_TOKENS if self_route.eligible(call.params, settings) else 0
    line, margin = preparer.lines[name]
    target = Target(entry.upstream_model, preparer.windows[name], asked.tokens, asked.param, added,
                    preparer.scales[name], prices=preparer.call_prices(name, call), line=line,
                    line_margin=margin)
    trigger = threshold(target, settings, call.control)
    return trigger is None or tokens <= trigger


async def would_have(preparer: Builder, entry: ModelEntry, call: ChatCall, settings: MixprSettings,
                     tokens: int) -> Figures:
    """Compress mode's preparation of ``call`` (after the response), and both sides' cached prefix:
    the client's previous turn, and what of the gateway's bytes repeats its own previous request."""
    added = self_route.INSTRUCTION_TOKENS if self_route.eligible(call.params, settings) else 0
    would = await preparer.build(entry, call, settings, call.control, added, prefix=True,
                                 history=preparer.would)
    ends = resets.turn_ends(call.messages)
    previous = ends[-2] if len(ends) > 1 else -1
    cached = 0
    if previous >= 0:  # the client's previous request is this one's messages up to there
        earlier = replace(call, messages=call.messages[: previous + 1])
        cached = (await as_sent(preparer, entry, earlier, settings)).original_tokens
    if would.action == "passthrough":  # the same bytes: the same price, whatever the two counts say
        return Figures(tokens, tokens, cached, cached, written=previous >= 0)
    return Figures(tokens, would.final_tokens, cached, would.reused_tokens, written=previous >= 0)
