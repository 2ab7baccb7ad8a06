"""Deliberate, rare resets: when the messages' forms no longer fit, the older part goes harder, once.

The scan is causal. It walks the messages in order, adding each one's tokens at its current level;
where the sum first exceeds ``room`` (the window's room, or the trigger in cost mode) is a *reset
point*: the oldest messages of the older part (before the newest turn) go up by the fewest levels,
and then as few of them as bring the sum down to ``after`` (a share of the room, or the cost
budget), in one step, and the walk goes on. The decision at message ``i`` reads messages ``0..i``
only, so the scan over a request's first ``k`` messages finds the same points as the scan of every
later request of the conversation: a cold instance reproduces them, and between two resets a
conversation only appends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Sizes of messages ``indices`` at ``levels`` (computing their forms when needed).
Sizes = Callable[[Sequence[int], Sequence[int]], list[int]]


@dataclass
class Scan:
    """Levels per message after the scan, where resets happened, and the levels as they were when
    the scan had read message ``snapshot_at`` (what the previous request of the conversation sent)."""

    levels: list[int]
    points: list[int] = field(default_factory=list)
    snapshot: list[int] | None = None
    total: int = 0


def scan(sizes: list[int], constant: int, *, room: int, after: int, older_end: Callable[[int], int],
         last_end: Callable[[int], int], harder: Sizes, max_level: int, snapshot_at: int = -1) -> Scan:
    """Levels for every message (``sizes``: their tokens at level 0), within ``room`` if resets can
    make it fit. ``older_end(i)``: the older part a reset at ``i`` hardens is ``[0, older_end(i))``;
    when that is not enough, ``[0, last_end(i))`` (the newest turn too: a window that small leaves
    no choice)."""
    current = list(sizes)
    result = Scan([0] * len(sizes), total=constant)
    for i, size in enumerate(sizes):
        result.total += size
        if result.total > room:
            _reset(result, current, i, older_end(i), after, harder, max_level)
        if result.total > room:
            _reset(result, current, i, last_end(i), room, harder, max_level)
        if i == snapshot_at:
            result.snapshot = list(result.levels)
    return result


def _reset(result: Scan, current: list[int], i: int, end: int, after: int, harder: Sizes,
           max_level: int) -> None:
    """Raise the levels of the oldest messages of ``[0, end)``, by the fewest steps and then as few
    of them as bring the total under ``after``: the newest messages are the likeliest to be read
    again, so they keep their form longest."""
    older = [j for j in range(end) if result.levels[j] < max_level]
    if not older:
        return
    for step in range(1, max_level + 1):
        levels = [min(result.levels[j] + step, max_level) for j in older]
        sizes = harder(older, levels)
        saved, count = 0, 0
        for j, size in zip(older, sizes, strict=True):
            if result.total - saved <= after:
                break
            saved += current[j] - size
            count += 1
        if result.total - saved <= after or all(level == max_level for level in levels):
            break
    if saved <= 0:
        return  # nothing left to gain: not a reset (it would change bytes for nothing)
    for j, level, size in zip(older[:count], levels, sizes, strict=False):
        result.levels[j], current[j] = level, size
    result.total -= saved
    if not result.points or result.points[-1] != i:
        result.points.append(i)
