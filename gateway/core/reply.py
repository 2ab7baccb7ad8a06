"""How many tokens the reply may take: the client's ``max_tokens``, lowered when it leaves the
prompt no useful room (issues 28 and 35).

Agents ask for long replies out of habit (Claude Code sends ``max_tokens: 32000`` for Claude
models) and most replies are far shorter, but every token kept for the reply is taken from the
prompt: on a 32k-window model that reserve leaves the prompt nothing, and the provider refuses a
prompt plus ``max_tokens`` over its window. Compressing the prompt is this product's job, so the
reply is kept as asked while it leaves the prompt its least useful room: the conversation's constant
parts (system prompt and tool definitions) plus ``1/REPLY_SHARE`` of the window for the rest,
compressed as it must be. Past that the reply is lowered to its *ceiling*: a quarter of the window,
less when the model's ``max_output_tokens`` is smaller, never less than the least reply
(``completion_reserve_tokens``, what a request without ``max_tokens`` gets; with an Anthropic
thinking budget, ``THINKING_MIN`` more). When even the ceiling leaves the constant parts no such
room, it is lowered to the least reply.

The decision reads the model, the config, the reply asked and the constant parts only, never the
rest of the prompt: a conversation's turns keep one reply and so one room, and its reset points stay
where they were (``gateway.conversation.resets``). Only a request that cannot be sent at all beside that
reply gets the least reply instead (``gateway.core.prepare``), rather than a refusal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from gateway.compress import messages as shape

REPLY_SHARE = 4  # a lowered reply keeps at most 1/this of the window; the prompt keeps the rest
THINKING_MIN = 1024  # Anthropic's least thinking budget (and a thinking budget must be below max_tokens)
CONSTANT_ROLES = ("system", "developer")
# The chat fields that set the reply's size (the Responses API's max_output_tokens arrives as max_tokens).
LIMITS = ("max_completion_tokens", "max_tokens")
HEADER = "x-mixpr-max-tokens"


@dataclass(frozen=True)
class Reply:
    """What the client asked for the reply (None: it did not say) and what is kept free for it."""

    param: str | None
    asked: int | None
    tokens: int

    @property
    def lowered(self) -> bool:
        return self.asked is not None and self.tokens < self.asked

    def to(self, tokens: int) -> Reply:
        """This reply lowered to ``tokens`` (never raised)."""
        return replace(self, tokens=min(self.tokens, tokens))


def asked(params: dict[str, Any], default: int) -> Reply:
    """The reply the request asks for; ``default`` tokens kept when it sets no limit."""
    param = next((k for k in LIMITS if params.get(k)), None)
    if param is None:
        return Reply(None, None, default)
    return Reply(param, int(params[param]), int(params[param]))


def ceiling(window: int, max_output: int | None, floor: int) -> int:
    """The most a lowered reply keeps: a share of the window, at most the model's longest reply,
    at least ``floor``."""
    share = window // REPLY_SHARE
    return max(floor, min(share, max_output) if max_output else share)


def least(params: dict[str, Any], floor: int) -> int:
    """The least reply: ``floor``, and room for Anthropic's least thinking budget beside it."""
    return floor + THINKING_MIN if _thinking_budget(params) is not None else floor


def kept(asked: Reply, window: int, constant: int, top: int, lowest: int) -> Reply:
    """The reply kept for a request asking ``asked`` of a model with ``window`` tokens, whose constant
    parts (system prompt, tool definitions, what the gateway adds) take ``constant``: as asked while
    it leaves them and a share of the window for the rest; else the ceiling ``top`` (at least
    ``lowest``), or ``lowest`` when the ceiling leaves them no such room either."""
    history = window // REPLY_SHARE
    if constant + asked.tokens + history <= window:
        return asked
    top = max(top, lowest)
    return asked.to(top if constant + top + history <= window else lowest)


def constant_text(messages: list[dict[str, Any]], tools: Any) -> str:
    """What stays the same through a conversation: its system and developer messages and its tools."""
    texts = [shape.text(m) for m in messages if m.get("role") in CONSTANT_ROLES]
    return "\n".join([*texts, json.dumps(tools)] if tools else texts)


def forwarded(params: dict[str, Any], sent: tuple[int, int] | None,
              names: tuple[str, ...] = LIMITS) -> dict[str, Any]:
    """``params`` as the upstream gets them: each of ``names`` they set at the lowered limit
    (``sent``: asked, kept), and an Anthropic thinking budget below it, as Anthropic requires (and at
    least ``THINKING_MIN``)."""
    if sent is None:
        return params
    tokens = sent[1]
    out = {**params, **{k: tokens for k in names if params.get(k)}}
    budget = _thinking_budget(params)
    if budget is not None and budget >= tokens:
        # Never under Anthropic's least: a lowered reply is never under ``least`` (THINKING_MIN more).
        out["thinking"] = {**params["thinking"], "budget_tokens": max(THINKING_MIN, tokens - 1)}
    return out


def _thinking_budget(params: dict[str, Any]) -> int | None:
    thinking = params.get("thinking")
    if isinstance(thinking, dict) and isinstance(thinking.get("budget_tokens"), int) \
            and not isinstance(thinking["budget_tokens"], bool):
        return int(thinking["budget_tokens"])
    return None


def header(sent: tuple[int, int] | None) -> dict[str, str]:
    """``x-mixpr-max-tokens: 32000->8192`` when the reply was lowered; nothing otherwise."""
    return {HEADER: f"{sent[0]}->{sent[1]}"} if sent else {}
