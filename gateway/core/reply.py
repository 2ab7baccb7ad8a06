"""How many tokens the reply may take: the client's ``max_tokens``, lowered when it leaves the
prompt no room (issue 28).

Agents ask for long replies out of habit (Claude Code sends ``max_tokens: 32000`` for Claude
models) and most replies are far shorter, but every token kept for the reply is taken from the
prompt: on a 32k-window model that reserve leaves the prompt nothing, and the provider refuses a
prompt plus ``max_tokens`` over its window. So when the prompt, as it would be sent (whole below the
trigger, else compressed to the budget: ``policy.sent_size``), does not fit beside the reply asked
for, the reply is lowered to its *ceiling*: a quarter of the window, less
when the model's ``max_output_tokens`` is smaller, never less than ``completion_reserve_tokens``
(the reply a request without ``max_tokens`` gets). When the prompt cannot be made to fit beside even
that (what is never compressed is too long), it is lowered to ``completion_reserve_tokens``; only
when that does not fit either is the request refused. The lowered value is what the upstream
receives.

The ceiling is a function of the model alone, never of the prompt: a conversation's turns keep one
room, so its reset points stay where they were (``gateway.compress.resets``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

REPLY_SHARE = 4  # a lowered reply keeps at most 1/this of the window; the prompt keeps the rest
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


def forwarded(params: dict[str, Any], sent: tuple[int, int] | None,
              names: tuple[str, ...] = LIMITS) -> dict[str, Any]:
    """``params`` as the upstream gets them: each of ``names`` they set at the lowered limit
    (``sent``: asked, kept), and an Anthropic thinking budget below it, as Anthropic requires."""
    if sent is None:
        return params
    tokens = sent[1]
    out = {**params, **{k: tokens for k in names if params.get(k)}}
    thinking = params.get("thinking")
    if isinstance(thinking, dict) and isinstance(thinking.get("budget_tokens"), int) \
            and thinking["budget_tokens"] >= tokens:
        out["thinking"] = {**thinking, "budget_tokens": tokens - 1}
    return out


def header(sent: tuple[int, int] | None) -> dict[str, str]:
    """``x-mixpr-max-tokens: 32000->8192`` when the reply was lowered; nothing otherwise."""
    return {HEADER: f"{sent[0]}->{sent[1]}"} if sent else {}
