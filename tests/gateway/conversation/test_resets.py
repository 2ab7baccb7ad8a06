"""Resets: the causal scan, and what a reset may touch."""

from __future__ import annotations

from typing import Any

from gateway.conversation import resets


def test_the_scan_is_causal() -> None:
    """The reset points and levels of a conversation's first k messages are those of every longer one."""
    sizes = [50, 400, 30, 900, 30, 800, 30, 700, 30, 900, 30, 600]

    def movable(i: int, end: int, levels: Any, wide: bool) -> int:
        now = {resets.ORIGINAL: lambda j: sizes[j], resets.FIRST_SIGHT: lambda j: sizes[j] // 2}
        return sum(now.get(levels[j], lambda j: cut[levels[j]])(j) for j in range(end) if sizes[j] > 100)

    def recut(i: int, end: int, budget: int, levels: Any, wide: bool) -> dict[int, int]:
        movable = [j for j in range(end) if sizes[j] > 100]
        cut[(i, end)] = budget // len(movable)
        return {j: budget // len(movable) for j in movable}

    def run(k: int, verbatim: bool, snapshot_at: int = -1) -> resets.Scan:
        rules = resets.Rules(room=2000, share=lambda fixed: (2000 - fixed) // 2,
                             older_end=lambda i: max(0, i - 1), last_end=lambda i: i, movable=movable,
                             recut=recut)
        return resets.scan(resets.Sizes(sizes[:k], lambda: [s // 2 for s in sizes[:k]], verbatim), 10,
                           rules, snapshot_at=snapshot_at)

    cut: dict[Any, int] = {}  # each reset's size per message
    for verbatim in (True, False):
        full = run(len(sizes), verbatim)
        assert full.points and full.total <= 2000
        for k in range(1, len(sizes)):
            assert run(k, verbatim).points == [p for p in full.points if p < k]
            assert run(k, verbatim).levels == run(len(sizes), verbatim, k - 1).snapshot


def test_a_reset_that_does_not_pay_waits_and_the_window_still_forces_one() -> None:
    """Cost mode: past the trigger a reset is made only when it pays; past the window, always."""
    sizes = [100] + [500] * 30

    def recut(i: int, end: int, budget: int, levels: Any, wide: bool) -> dict[int, int]:
        return {j: budget // max(1, end - 1) for j in range(1, end)}

    def run(pays: Any, limit: int) -> resets.Scan:
        return resets.scan(resets.Sizes(sizes, lambda: sizes, False), 0, resets.Rules(
            room=2000, share=lambda fixed: 1000 - fixed, older_end=lambda i: i, last_end=lambda i: i,
            movable=lambda i, end, levels, wide: sum(sizes[1:end]) if all(
                level == resets.FIRST_SIGHT for level in levels[1:end]) else 900,
            recut=recut, limit=limit, worth=lambda i, before, after: 1.0 if pays(i, before, after) else -1.0,
            gated=True))

    asked: list[int] = []
    never = run(lambda i, before, after: asked.append(i) is not None, limit=100_000)
    assert not never.points and never.total == sum(sizes)
    assert len(asked) < 20  # weighed again only as the total grows, not at every message
    forced = run(lambda i, before, after: False, limit=6000)
    assert forced.points and forced.total <= 6000
    always = run(lambda i, before, after: True, limit=100_000)
    assert always.points[0] == 4  # the first message past the trigger


def test_a_reset_pays_by_the_models_cache_prices() -> None:
    from gateway.conversation.room import Room
    from gateway.prices import Prices

    anthropic = Room(16_000, 8_000, 0.6, 8_000, 1_000_000, Prices(1.0, 0.1, 1.25, "default"), gated=True)
    # 60k of cached prefix cut to 8k: each later turn reads 52k fewer (5.2 a turn), the rewrite costs
    # 1.25 * 8k - 0.1 * 60k = 4: it pays after one turn of the conversation's expected future.
    assert anthropic.pays(turns=10, before=60_000, after=8_000)
    assert not anthropic.pays(turns=0, before=60_000, after=8_000)
    # 18k cut to 12k after 5 turns: 5 * 0.6 = 3 < 1.25 * 12k - 1.8k = 13.2: it does not pay.
    assert not anthropic.pays(turns=5, before=18_000, after=12_000)
    assert anthropic.worth(turns=10, before=60_000, after=8_000) == 10 * 0.1 * 52_000 - (10_000 - 6_000)
    free = Room(16_000, 8_000, 0.6, 8_000, 1_000_000, Prices(0.0, 0.0, 0.0, "litellm"), gated=True)
    assert free.worth(turns=10, before=60_000, after=8_000) == anthropic.worth(turns=10, before=60_000,
                                                                              after=8_000)  # no 0 / 0
    window = Room(16_000, None, 0.6, 9_600, 16_000, Prices(1.0, 0.1, 1.25, "default"))
    assert window.pays(turns=0, before=18_000, after=12_000)  # not gated: the window decides


def _long_session(steps: int) -> resets.Scan:
    """Each step an agent turn of 60 tokens a reset of long texts never cuts (``wide`` only) and an
    output of 200 it does; room 4,000, a reset fills 0.6 of what the fixed part leaves."""
    sizes = [60, 200] * steps
    short = {j for j in range(len(sizes)) if sizes[j] == 60}
    now: dict[int, int] = {}

    def pool(end: int, wide: bool) -> list[int]:
        return [j for j in range(end) if wide or j not in short]

    def movable(i: int, end: int, levels: Any, wide: bool) -> int:
        return sum(now.get(j, sizes[j]) for j in pool(end, wide))

    def recut(i: int, end: int, budget: int, levels: Any, wide: bool) -> dict[int, int]:
        cut = pool(end, wide)
        now.update({j: min(now.get(j, sizes[j]), budget // len(cut)) for j in cut})
        return {j: now[j] for j in cut}

    return resets.scan(resets.Sizes(sizes, lambda: sizes, False), 0, resets.Rules(
        room=4000, share=lambda fixed: int(0.6 * (4000 - fixed)), older_end=lambda i: i - 1,
        last_end=lambda i: i, movable=movable, recut=recut))


def test_a_long_session_does_not_reset_at_every_step() -> None:
    """The agent's short turns, which a reset of long texts never cuts, grow to fill the room; a reset
    that then frees almost nothing came again at the next step, and the next (a 300-step run through
    32k reset at 239, 241, 242 and 243). Once a reset would leave under a tenth of the room free, it
    cuts the short texts too: never three steps in a row reset (before: runs of ten and more)."""
    scan = _long_session(120)
    assert scan.total <= 4000
    steps = [point // 2 for point in scan.points]
    runs = [a for a, b, c in zip(steps, steps[1:], steps[2:], strict=False) if c - a <= 2]
    assert not runs, steps
