"""Deliberate, rare resets: when the messages' forms no longer fit, the older part goes harder, once.

The scan is causal. It walks the messages in order, adding each one's tokens at its current level;
where the sum first exceeds ``room`` (the window's room, or the trigger in cost mode) is a *reset
point*: the oldest messages of the older part (before the newest turn) go up by the fewest levels,
and then as few of them as bring the sum down to ``after`` (a share of the room, or the cost
budget), in one step, and the walk goes on. The decision at message ``i`` reads messages ``0..i``
only, so the scan over a request's first ``k`` messages finds the same points as the scan of every
later request of the conversation: a cold instance reproduces them, and between two resets a
conversation only appends.

What a reset may touch is read from the messages here too (``older_end``, ``last_end``, ``stale``):
never the newest turn while the older part is enough, never a thinking block or what precedes it
within its tool loop, and first the tool outputs the agent no longer refers to.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.compress import messages as shape

# Sizes of messages ``indices`` at ``levels`` (computing their forms when needed).
Sizes = Callable[[Sequence[int], Sequence[int]], list[int]]
# Of the older messages a reset at ``i`` may harden, those the agent no longer works on.
Stale = Callable[[int, list[int]], list[int]]


@dataclass
class Scan:
    """Levels per message after the scan, where resets happened, and the levels as they were when
    the scan had read message ``snapshot_at`` (what the previous request of the conversation sent)."""

    levels: list[int]
    points: list[int] = field(default_factory=list)
    snapshot: list[int] | None = None
    total: int = 0


def scan(sizes: list[int], constant: int, *, room: int, after: int, older_end: Callable[[int], int],
         last_end: Callable[[int], int], harder: Sizes, max_level: int, snapshot_at: int = -1,
         stale: Stale | None = None) -> Scan:
    """Levels for every message (``sizes``: their tokens at level 0), within ``room`` if resets can
    make it fit. ``older_end(i)``: the older part a reset at ``i`` hardens is ``[0, older_end(i))``;
    when that is not enough, ``[0, last_end(i))`` (the newest turn too: a window that small leaves
    no choice). ``stale(i, older)``: those of them a reset at ``i`` would rather harden (reading
    messages ``0..i`` only) go harder first, and alone when that brings the total halfway between
    ``after`` and ``room``."""
    current = list(sizes)
    result = Scan([0] * len(sizes), total=constant)
    for i, size in enumerate(sizes):
        result.total += size
        if result.total > room:
            _reset(result, current, i, older_end(i), after, harder, max_level, stale, (after + room) // 2)
        if result.total > room:
            _reset(result, current, i, last_end(i), room, harder, max_level, stale)
        if i == snapshot_at:
            result.snapshot = list(result.levels)
    return result


def _reset(result: Scan, current: list[int], i: int, end: int, after: int, harder: Sizes,
           max_level: int, stale: Stale | None = None, enough: int = 0) -> None:
    """Raise the levels of the oldest messages of ``[0, end)``, by the fewest steps and then as few
    of them as bring the total under ``after``: the newest messages are the likeliest to be read
    again, so they keep their form longest. When ``stale`` names some of them, they go harder first,
    as far as the last level, and alone when that brings the total under ``enough`` (a looser
    target: the outputs the agent works on keep their form)."""
    older = [j for j in range(end) if result.levels[j] < max_level]
    if not older:
        return
    if stale is not None:
        first = stale(i, older)
        if first and first != older:
            levels, sizes, saved, count = _fewest(result, current, first, after, harder, max_level)
            _apply(result, current, i, first[:count], levels, sizes, saved)
            if result.total <= max(after, enough):
                return
            older = [j for j in older if result.levels[j] < max_level]
            if not older:
                return
    levels, sizes, saved, count = _fewest(result, current, older, after, harder, max_level)
    _apply(result, current, i, older[:count], levels, sizes, saved)


def _fewest(result: Scan, current: list[int], older: list[int], after: int, harder: Sizes,
            max_level: int) -> tuple[list[int], list[int], int, int]:
    """The fewest steps, and then the fewest of ``older`` (in order), that bring the total under
    ``after`` (or as near as the last level gets)."""
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
    return levels, sizes, saved, count


def _apply(result: Scan, current: list[int], i: int, chosen: list[int], levels: list[int], sizes: list[int],
           saved: int) -> None:
    if saved <= 0:
        return  # nothing left to gain: not a reset (it would change bytes for nothing)
    for j, level, size in zip(chosen, levels, sizes, strict=False):
        result.levels[j], current[j] = level, size
    result.total -= saved
    if not result.points or result.points[-1] != i:
        result.points.append(i)


# -- what a reset may touch --------------------------------------------------------------------


def turn_ends(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Where earlier requests of this conversation ended (a message the assistant answered), and
    the end of this one."""
    ends = [i for i in range(len(messages) - 1)
            if messages[i].get("role") in ("user", "tool") and messages[i + 1].get("role") == "assistant"]
    return [*ends, len(messages) - 1]


IDENTIFIER = re.compile(r"[A-Za-z_][\w-]*(?:[./][\w-]+)+|[A-Za-z_]\w*_\w+|[a-z]+[A-Z]\w*")


def stale(messages: Sequence[dict[str, Any]], i: int, older: list[int]) -> list[int]:
    """Of ``older``, those a reset at ``i`` would rather harden: all but the tool outputs some of whose
    identifiers (paths, dotted or snake_case or camelCase names) the agent has written since (in its
    words or tool-call arguments, up to ``i``). Causal: reads messages ``0..i`` only. Linear: one pass
    records where the agent last wrote each identifier."""
    last_written: dict[str, int] = {}
    for k in range(i + 1):
        if messages[k].get("role") == "assistant":
            for name in IDENTIFIER.findall(agent_words(messages[k])):
                last_written[name] = k

    def mentioned(j: int) -> bool:
        if messages[j].get("role") != "tool":
            return False
        return any(last_written.get(name, -1) > j for name in IDENTIFIER.findall(shape.text(messages[j])))

    return [j for j in older if not mentioned(j)]


def agent_words(message: dict[str, Any]) -> str:
    """An assistant message's text and its tool calls' arguments."""
    args = [str(shape.function(c).get("arguments", "")) for c in shape.calls(message)]
    return "\n".join([shape.text(message), *args])


def older_end(messages: Sequence[dict[str, Any]], i: int) -> int:
    """The end of the part a reset at ``i`` may harden: before the newest assistant message up to
    ``i`` (the newest turn stays as first sent), and before any assistant message that carries
    thinking blocks after the last user message (its provider checks what precedes it)."""
    end = next((j for j in range(i, -1, -1) if messages[j].get("role") == "assistant"), 0)
    return min(end, thinking_end(messages, i))


def thinking_end(messages: Sequence[dict[str, Any]], i: int) -> int:
    """The first assistant message with thinking blocks since the last user message up to ``i``
    (``i + 1`` if none): its provider checks what precedes it, within the current tool loop."""
    last_user = next((j for j in range(i, -1, -1) if messages[j].get("role") == "user"), 0)
    return next((j for j in range(last_user, i + 1) if messages[j].get("role") == "assistant"
                 and shape.thinks(messages[j])), i + 1)


def last_end(messages: Sequence[dict[str, Any]], i: int) -> int:
    """What a reset at ``i`` hardens when the older part is not enough: everything up to ``i`` but the
    last user message (the question), and still nothing from a checked thinking block on."""
    end = i + 1
    if messages[i].get("role") == "user":
        end = i
    return min(end, thinking_end(messages, i))
