"""When to compress and to what budget: per-request switches, the model's window, the settings.

Two budget modes: ``"auto"`` keeps what the window leaves (capped by ``max_budget_tokens``, as most
models read worse past 32-64k tokens); a number is a cost budget and means that number.

A model whose prices double (or more) past a line below its window (``gateway.prices``' tiers) has that
line as a second, softer limit (``Target.line``): a request that fits the window but passes the line is
cut to just under it (``Target.ceiling``), no further, while the parts never cut leave room there; one
that does not fit the window is cut as before, and under the line too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.config import MixprSettings
from gateway.errors import BadRequest, ContextLengthExceeded
from gateway.prices import Prices
from mixpr import ROUTES

AUTO = "auto"
CONTROL_KEYS = ("enabled", "route", "budget_tokens")
MIN_BUDGET = 16
_DIGITS = re.compile("[0-9]{1,18}")


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
    asked: int | None = None  # what the client asked for the reply, when ``reserve`` is lowered from it
    # The model's prices (``gateway.prices.entry_prices``: its config's model_info first); None: the
    # upstream model's in LiteLLM's cost map, else the defaults.
    prices: Prices | None = None
    # The price line the request is kept under (model tokens, below the window), and what is kept free
    # under it (``price_tiers.margin_tokens``); None: no tier, or tiers off.
    line: int | None = None
    line_margin: int = 0

    @property
    def limit(self) -> int:
        return self.window - self.reserve - self.added

    @property
    def ceiling(self) -> int:
        """What a cut must fit: the limit, or just under the price line when there is one."""
        if self.line is None:
            return self.limit
        return min(self.limit, self.line - self.line_margin - self.added)

    def within(self, fixed: int) -> Target:
        """This target, without its line when the ``fixed`` tokens (never cut) leave no room under it:
        a line a cut cannot reach is not a trigger."""
        if self.line is None or self.ceiling - fixed >= MIN_BUDGET:
            return self
        return replace(self, line=None)

    def tokens(self, counted: int) -> int:
        """The model's tokens for a tiktoken count (rounded up: a margin errs towards compressing)."""
        return counted if self.scale == 1 else math.ceil(counted * self.scale)

    def counted(self, tokens: int) -> int:
        """The tiktoken count within ``tokens`` of the model's: how budgets are passed to MixPR."""
        return tokens if self.scale == 1 else max(1, int(tokens / self.scale))


def price_line(prices: Prices | None, window: int, settings: MixprSettings) -> tuple[int | None, int]:
    """The price line a request to a model with ``prices`` and ``window`` is kept under, and what is
    kept free under it: the lowest tier line below the window (None: no tier, or ``price_tiers`` off)."""
    tiers = settings.price_tiers
    margin = settings.completion_reserve_tokens if tiers.margin_tokens is None else tiers.margin_tokens
    if not tiers.enabled or prices is None:
        return None, margin
    return prices.line(window), margin


def threshold(target: Target, settings: MixprSettings, control: Control) -> int | None:
    """Prompt tokens above which to compress; None: never (disabled for this request)."""
    if control.enabled is False:
        return None
    if control.enabled is True:  # asked for explicitly: compress whatever exceeds the budget
        asked = control.budget_tokens or settings.budget_tokens
        # auto: whatever exceeds what auto would keep (the window's room, at most the cap)
        return min(target.limit, settings.max_budget_tokens) if asked == AUTO else asked
    if settings.compress_above_tokens is not None:  # under a price line too, when there is one
        return settings.compress_above_tokens if target.line is None else min(settings.compress_above_tokens,
                                                                              target.ceiling)
    return target.ceiling


def budget(fixed: int, target: Target, settings: MixprSettings, control: Control, parts: str = "",
           total: int | None = None) -> int:
    """Tokens MixPR may keep: auto fills the room up to the cap; a number is capped by the room.
    Under a price line (``Target.line``), a request of ``total`` tokens that fits the window is cut
    only to the line. ``parts``: what ``fixed`` is made of, for the 400 when it leaves no room."""
    room = target.limit - fixed
    if room < 1:
        said = _no_room(fixed, target) + (f" Never compressed: {parts}." if parts else "")
        raise ContextLengthExceeded(said, param=_blamed(fixed, target))
    under = target.ceiling - fixed
    asked = control.budget_tokens or settings.budget_tokens
    if asked != AUTO:
        return min(asked, room, under)
    fits = target.line is not None and total is not None and total <= target.limit
    return min(under if fits else settings.max_budget_tokens, room, under)


def _blamed(fixed: int, target: Target) -> str:
    return target.reserve_param if target.reserve_param and target.reserve >= fixed else "messages"


def _no_room(fixed: int, target: Target) -> str:
    if target.asked is not None:
        return (f"The parts of the prompt that are never compressed (system messages, tool definitions "
                f"and calls, images, message framing) take {fixed} tokens: with {target.reserve_param} "
                f"lowered from {target.asked} to {target.reserve}, the least reply the gateway leaves room "
                f"for, they still exceed the {target.window} tokens the model accepts.")
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


def parse_control(field: Any, headers: Mapping[str, str]) -> Control:
    """Per-request switches: the ``mixpr`` body field, else the ``x-mixpr-*`` headers."""
    raw: dict[str, Any] = {}
    for key in CONTROL_KEYS:
        header = headers.get("x-mixpr-" + key.replace("_", "-"))
        if header is not None:
            raw[key] = _from_header(key, header)
    if field is not None:
        if not isinstance(field, dict):
            raise BadRequest("'mixpr' must be an object.", param="mixpr")
        unknown = sorted(set(field) - set(CONTROL_KEYS))
        if unknown:
            valid = ", ".join(CONTROL_KEYS)
            raise BadRequest(f"Unknown mixpr option(s): {', '.join(unknown)}; valid: {valid}.",
                             param=f"mixpr.{unknown[0]}")
        raw.update(field)
    return _checked_control(raw)


def _from_header(key: str, value: str) -> Any:
    text = value.strip().lower()
    if key == "enabled":
        return {"true": True, "1": True, "false": False, "0": False}.get(text, value)
    if key == "budget_tokens":
        # ASCII digits only ("²".isdigit() is true, int() refuses it), and few enough for int().
        return int(text) if _DIGITS.fullmatch(text) else text if text == AUTO else value
    return text


def _checked_control(raw: dict[str, Any]) -> Control:
    enabled, route, budget = raw.get("enabled"), raw.get("route"), raw.get("budget_tokens")
    if enabled is not None and not isinstance(enabled, bool):
        raise BadRequest("mixpr.enabled must be true or false.", param="mixpr.enabled")
    if route is not None and route not in ROUTES:
        raise BadRequest(f"mixpr.route must be one of {', '.join(ROUTES)}.", param="mixpr.route")
    if budget is not None and budget != AUTO and not is_int_at_least(budget, MIN_BUDGET):
        raise BadRequest(f"mixpr.budget_tokens must be \"auto\" or an integer >= {MIN_BUDGET}.",
                         param="mixpr.budget_tokens")
    return Control(enabled=enabled, route=route, budget_tokens=budget)


def is_int_at_least(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least
