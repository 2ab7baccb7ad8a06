"""Resets: the causal scan, and what a reset may touch."""

from __future__ import annotations

from typing import Any

from gateway.compress import resets


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
        return resets.scan(
            resets.Sizes(sizes[:k], lambda: [s // 2 for s in sizes[:k]], verbatim),
            10,
            room=2000,
            share=lambda fixed: (2000 - fixed) // 2,
            older_end=lambda i: max(0, i - 1),
            last_end=lambda i: i,
            movable=movable,
            recut=recut,
            snapshot_at=snapshot_at,
        )

    cut: dict[Any, int] = {}  # each reset's size per message
    for verbatim in (True, False):
        full = run(len(sizes), verbatim)
        assert full.points and full.total <= 2000
        for k in range(1, len(sizes)):
            assert run(k, verbatim).points == [p for p in full.points if p < k]
            assert run(k, verbatim).levels == run(len(sizes), verbatim, k - 1).snapshot
