"""When to compress and to what budget: per-request switches, the model's window, the settings."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import MixprSettings
from gateway.errors import ContextLengthExceeded


@dataclass(frozen=True)
class Control:
    """Per-request switches from the ``mixpr`` body field or ``x-mixpr-*`` headers."""

    enabled: bool | None = None  # None: the config's trigger decides; True: compress above budget
    route: str | None = None
    budget_tokens: int | None = None


@dataclass(frozen=True)
class Target:
    """What the request must fit: the model's window and what is kept free for the answer."""

    model: str  # tokenizer name (the upstream model)
    window: int
    reserve: int

    @property
    def limit(self) -> int:
        return self.window - self.reserve


def threshold(target: Target, settings: MixprSettings, control: Control) -> int | None:
    """Prompt tokens above which to compress; None: never (disabled for this request)."""
    if control.enabled is False:
        return None
    if control.enabled is True:  # asked for explicitly: compress whatever exceeds the budget
        return control.budget_tokens or settings.budget_tokens
    if settings.compress_above_tokens is not None:
        return settings.compress_above_tokens
    return target.limit


def budget(fixed: int, target: Target, settings: MixprSettings, control: Control) -> int:
    """Tokens MixPR may keep: the configured budget, capped by what the window leaves."""
    room = target.limit - fixed
    if room < 1:
        raise ContextLengthExceeded(
            f"The parts of the prompt that are never compressed (system messages, tool definitions "
            f"and calls, images, message framing) take {fixed} tokens, more than the {target.window} "
            f"the model accepts with {target.reserve} kept for the reply.",
            param="messages",
        )
    return min(control.budget_tokens or settings.budget_tokens, room)
