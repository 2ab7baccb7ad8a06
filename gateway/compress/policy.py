"""When to compress and to what budget: per-request switches, the model's window, the settings.

Two budget modes: ``"auto"`` keeps what the window leaves (capped by ``max_budget_tokens``, as most
models read worse past 32-64k tokens); a number is a cost budget and means that number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.config import MixprSettings
from gateway.errors import ContextLengthExceeded

AUTO = "auto"


@dataclass(frozen=True)
class Control:
    """Per-request switches from the ``mixpr`` body field or ``x-mixpr-*`` headers."""

    enabled: bool | None = None  # None: the config's trigger decides; True: compress above budget
    route: str | None = None
    budget_tokens: int | str | None = None  # a number or "auto"


@dataclass(frozen=True)
class Target:
    """What the request must fit: the model's window and what is kept free for the answer."""

    model: str  # tokenizer name (the upstream model)
    window: int
    reserve: int
    reserve_param: str | None = None  # "max_tokens" when the client set the reserve, for errors
    added: int = 0  # tokens the gateway adds after compression (the Self-Route instruction)
    scale: float = 1.0  # the model's tokens per tiktoken token: 1 + token_margin (gateway.core.model_tokens)

    @property
    def limit(self) -> int:
        return self.window - self.reserve - self.added

    def tokens(self, counted: int) -> int:
        """The model's tokens for a tiktoken count (rounded up: a margin errs towards compressing)."""
        return counted if self.scale == 1 else math.ceil(counted * self.scale)

    def counted(self, tokens: int) -> int:
        """The tiktoken count within ``tokens`` of the model's: how budgets are passed to MixPR."""
        return tokens if self.scale == 1 else max(1, int(tokens / self.scale))


def threshold(target: Target, settings: MixprSettings, control: Control) -> int | None:
    """Prompt tokens above which to compress; None: never (disabled for this request)."""
    if control.enabled is False:
        return None
    if control.enabled is True:  # asked for explicitly: compress whatever exceeds the budget
        asked = control.budget_tokens or settings.budget_tokens
        # auto: whatever exceeds what auto would keep (the window's room, at most the cap)
        return min(target.limit, settings.max_budget_tokens) if asked == AUTO else asked
    if settings.compress_above_tokens is not None:
        return settings.compress_above_tokens
    return target.limit


def budget(fixed: int, target: Target, settings: MixprSettings, control: Control) -> int:
    """Tokens MixPR may keep: auto fills the room up to the cap; a number is capped by the room."""
    room = target.limit - fixed
    if room < 1:
        raise ContextLengthExceeded(_no_room(fixed, target), param=_blamed(fixed, target))
    asked = control.budget_tokens or settings.budget_tokens
    return min(settings.max_budget_tokens if asked == AUTO else asked, room)


def _blamed(fixed: int, target: Target) -> str:
    return target.reserve_param if target.reserve_param and target.reserve >= fixed else "messages"


def _no_room(fixed: int, target: Target) -> str:
    if target.reserve_param and target.reserve >= target.window:
        return (f"{target.reserve_param}={target.reserve} leaves no room for the prompt: the model "
                f"accepts {target.window} tokens in all. Ask for fewer {target.reserve_param}.")
    if target.reserve_param and target.reserve >= fixed:
        return (f"{target.reserve_param}={target.reserve} plus the parts of the prompt that are never "
                f"compressed ({fixed} tokens) exceed the {target.window} tokens the model accepts. "
                f"Ask for fewer {target.reserve_param}.")
    return (f"The parts of the prompt that are never compressed (system messages, tool definitions "
            f"and calls, images, message framing) take {fixed} tokens, more than the {target.window} "
            f"the model accepts with {target.reserve} kept for the reply.")
