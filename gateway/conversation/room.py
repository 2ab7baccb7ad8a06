"""A conversation's room, in one unit: where a reset happens, what it leaves, what a form keeps.

Every figure here is in *counted* tokens (tiktoken's, what the scan adds up and MixPR is given):
the model's tokens (the window, the trigger, a cost budget) are converted once, here, by
``Target.counted``. Mixing the two (a model figure compared with a counted one, or converted twice)
moves the reset points by the model's ``token_margin``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.compress import policy
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings
from gateway.prices import ANTHROPIC_WRITE_RATIO, DEFAULT_INPUT, DEFAULT_READ_RATIO, Prices, prices_for

# A room made without a model's prices (or a model priced 0): gateway.prices' defaults, the dearer write.
DEFAULT_PRICES = Prices(DEFAULT_INPUT, DEFAULT_READ_RATIO * DEFAULT_INPUT,
                        ANTHROPIC_WRITE_RATIO * DEFAULT_INPUT, "default")

CAP_SHARE = 1  # one first-sight form keeps at most 1/this of what a reset brings the forms down to


@dataclass(frozen=True)
class Room:
    """``at``: the total over which a reset happens; ``after``: what a reset brings the total to in
    cost mode (None in window mode, where it is ``fill`` of what the fixed tokens leave); ``cap``:
    the most one first-sight form keeps (cost mode: the budget). All in counted tokens."""

    at: int
    after: int | None
    fill: float
    cap: int
    limit: int = 0  # what must fit whatever it costs: the window less the reply (counted tokens)
    prices: Prices | None = None  # the model's: what a reset is worth
    gated: bool = False  # cost mode: a reset past ``at`` is made only when it pays
    horizon: float = 1.0  # the turns a conversation can expect: this times the turns it has had
    line: int | None = None  # a price line (the model's tokens): past it every token is billed at its tier
    scale: float = 1.0  # the model's tokens per counted token (``Target.scale``)
    line_at: int = 0  # the total (counted) past which a prompt is taken as billed at the line's tier

    def worth(self, turns: int, before: int, after: int) -> float:
        """What a reset that brings ``before`` prompt tokens to ``after``, after ``turns`` turns, is
        expected to save, in input tokens' worth: each later turn reads ``after`` where it would have
        read ``before``, but the next request writes ``after`` to the cache where it would have read
        ``before``. The conversation is expected to go on for ``horizon`` times the turns it has had
        (the longer it has run, the longer it tends to run). Under a price line, ``before`` past the
        room under it is read at the tier's price (its margin is the tokenizer's error: the provider may
        count it past the line), and the conversation is expected to go on at least as long as it has."""
        read, _ = self.ratios(before)
        read_after, write = self.ratios(after)
        above = self.line is not None and before > self.line_at
        later = max(self.horizon, 1.0) * turns if above else self.horizon * turns
        return later * (read * before - read_after * after) - (write * after - read * before)

    def ratios(self, tokens: int = 0) -> tuple[float, float]:
        """The cache-read and cache-write prices of a prompt of ``tokens`` (counted) over the input
        price below any tier (a model priced 0, as some entries are, is weighed at the defaults');
        under a price line, past the room at the tier's prices."""
        prices = self.prices if self.prices is not None and self.prices.input > 0 else DEFAULT_PRICES
        billed = prices
        if self.line is not None and tokens > self.line_at:
            billed = prices.at(max(self.line + 1, math.ceil(tokens * self.scale)))
        return billed.cache_read / prices.input, billed.cache_write / prices.input

    def pays(self, turns: int, before: int, after: int) -> bool:
        """Whether that reset pays (always, where no prices gate resets: the window decides)."""
        return not self.gated or self.worth(turns, before, after) > 0

    def share(self, fixed: int) -> int:
        """What a reset leaves the text it may cut, given the ``fixed`` tokens it cannot."""
        if self.after is not None:
            return self.after - fixed
        return int(self.fill * (self.at - fixed))


def room(target: Target, settings: MixprSettings, control: Control) -> Room:
    """The room of a request with this target, config and per-request switches."""
    threshold = policy.threshold(target, settings, control)
    top = target.limit if threshold is None else min(threshold, target.limit)  # model tokens
    asked = control.budget_tokens or settings.budget_tokens
    fill = settings.prefix.reset_fill
    if _under_line(target, top, control):
        return _tiered(target, settings, top, asked, fill)
    if asked != policy.AUTO:
        # A reset leaves at most ``reset_fill`` of the room: one that brought the total to the room
        # itself (a budget at the trigger) would leave no room for the next step, and reset again.
        after = target.counted(min(int(asked), int(top * fill)))
        # A first-sight form keeps what the budget keeps: a pasted document's form is then what its
        # question was sent with when it came alone (compressed whole, to the budget).
        cap = target.counted(min(int(asked), top))
        prices = _prices(target)
        # A budget with no trigger of its own, or asked for by the request, is a bound, not a price:
        # only past an explicit ``compress_above_tokens`` is a reset weighed against what it costs.
        if control.enabled is True or settings.compress_above_tokens is None:
            return Room(target.counted(top), after, fill, max(1, cap // CAP_SHARE), target.counted(top),
                        prices)
        # A trigger under a price line: the gate weighs a total past the line at the tier's prices.
        return Room(target.counted(top), after, fill, max(1, cap // CAP_SHARE),
                    target.counted(target.limit), prices, gated=True, horizon=settings.prefix.reset_horizon,
                    line=target.line, scale=target.scale, line_at=target.counted(target.ceiling))
    limit = target.counted(top)
    return Room(limit, None, fill, max(1, target.counted(int(top * fill)) // CAP_SHARE), limit,
                _prices(target))


def _under_line(target: Target, top: int, control: Control) -> bool:
    """Whether the room's top is a price line's (``Target.line``), not the window's or the trigger's."""
    return (target.line is not None and control.enabled is not True and top == target.ceiling
            and target.ceiling < target.limit)


def _tiered(target: Target, settings: MixprSettings, top: int, asked: int | str, fill: float) -> Room:
    """The room under a price line: a reset past it is made when it pays at the tier's prices
    (``Room.worth``); the window, not the line, is what must fit whatever it costs."""
    if asked != policy.AUTO:
        after: int | None = target.counted(min(int(asked), int(top * fill)))
        cap = target.counted(min(int(asked), top))
    else:
        after, cap = None, target.counted(int(top * fill))
    assert target.line is not None  # _under_line
    return Room(target.counted(top), after, fill, max(1, cap // CAP_SHARE), target.counted(target.limit),
                _prices(target), gated=True, horizon=settings.prefix.reset_horizon,
                line=target.line, scale=target.scale, line_at=target.counted(top))


def _prices(target: Target) -> Prices:
    """The model's prices as the preparer resolved them (its config's model_info first)."""
    return target.prices if target.prices is not None else prices_for(target.model)
