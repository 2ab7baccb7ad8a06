"""The room of a conversation in one unit (counted tokens): where a reset happens, what it leaves."""

from __future__ import annotations

from gateway.compress.policy import Control, Target
from gateway.compress.room import room
from gateway.config import MixprSettings


def test_a_cost_budget_at_the_trigger_is_converted_once() -> None:
    """Scale 1.25: a budget equal to the trigger leaves 0.8x of it in counted tokens, not 0.64x
    (the model's tokens were converted twice)."""
    target = Target("gpt-4o", 100_000, 1_000, scale=1.25)
    settings = MixprSettings(budget_tokens=10_000, compress_above_tokens=10_000)
    space = room(target, settings, Control(enabled=True))
    assert space.at == 8_000
    assert space.share(0) <= space.at
    assert space.share(0) == 8_000  # what the budget allows, not 0.64x of it (6,400)
    assert space.cap == space.share(0)  # one first-sight form: at most what a reset leaves


def test_window_mode_leaves_reset_fill_of_what_the_fixed_parts_leave() -> None:
    target = Target("gpt-4o", 32_000, 1_000)
    space = room(target, MixprSettings(), Control())
    assert space.at == 31_000
    assert space.share(1_000) == int(0.6 * 30_000)
    assert space.cap == int(31_000 * 0.6)

