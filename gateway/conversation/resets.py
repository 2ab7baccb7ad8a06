"""Deliberate, rare resets: when the messages no longer fit, the older part is cut again for the task.

The scan is causal. It walks the messages in order, adding each one's tokens as first sent (as the
client wrote it until the conversation first passes the trigger, when ``verbatim_first`` asks for
that; its first-sight form otherwise); where the sum first exceeds ``room`` (the window's room, or
the trigger in cost mode) is a *reset point* ``i``: the older part (before the newest turn) is
compressed again, as one text under one budget (``recut``: MixPR for the task and what the agent is
doing at ``i``, ``gateway.conversation.history``), so that the total comes to what ``share`` leaves
it, and the walk goes on. The decision at message ``i`` reads messages ``0..i`` only, and a reset's
result is a pure function of them, so the scan over a request's first ``k`` messages finds the same
points and levels as the scan of every later request of the conversation: a cold instance
reproduces them, and between two resets a conversation only appends.

What a reset may touch is read from the messages here too (``older_end``, ``last_end``): never the
newest turn while the older part is enough, never a thinking block or what precedes it within its
tool loop.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.compress import messages as shape

Level = int | tuple[int, int]  # ORIGINAL, FIRST_SIGHT, or the (point, end) of the reset that cut it
ORIGINAL = -1  # the client's own text
FIRST_SIGHT = 0  # the message's first-sight form
FIT_TRIES = 3  # a cut that must fit the room is asked again for less at most this many times in all
# Tokens of the older part ``[0, end)`` that a reset at ``i`` may cut, at the messages' current levels
# (``wide``: short texts too, when nothing else makes the request fit).
Movable = Callable[[int, int, Sequence[Level], bool], int]
# A reset at ``i`` over ``[0, end)`` within ``budget`` tokens: the new size of each message it cut.
Recut = Callable[[int, int, int, Sequence[Level], bool], dict[int, int]]
# What a reset at ``i`` that brings the total from ``before`` to about ``after`` is expected to save
# over the turns the conversation can expect, less its cache write, in input tokens' worth.
Worth = Callable[[int, int, int], float]
RECONSIDER = 1.1  # a reset that did not pay is weighed again once the total has grown by this factor
# A reset leaves at least this share of the room free, or it cuts short texts too (``wide``): in a long
# session the agent's short turns and short outputs, which a reset of long texts never cuts, grow to
# fill the room, and every request reset again (a 300-step run through 32k: at 239, 241, 242, 243).
HEADROOM = 0.1


@dataclass
class Scan:
    """Levels per message after the scan, where resets happened, and the levels as they were when
    the scan had read message ``snapshot_at`` (what the previous request of the conversation sent)."""

    levels: list[Level] = field(default_factory=list)
    points: list[int] = field(default_factory=list)
    snapshot: list[Level] | None = None
    total: int = 0
    expected: dict[int, float] = field(default_factory=dict)  # reset point -> its expected saving


@dataclass(frozen=True)
class Sizes:
    """Each message's tokens as the client wrote it, and a way to its first-sight forms' tokens
    (``first_sight()``, computed only once the scan needs them)."""

    original: list[int]
    first_sight: Callable[[], list[int]]
    verbatim_first: bool  # messages go as written until the conversation first passes the trigger


@dataclass(frozen=True)
class Rules:
    """What a scan asks as it walks one request's messages: ``room``, over which a reset happens, and
    ``share`` of it a reset leaves the text it may cut (given the ``fixed`` tokens it cannot);
    ``older_end`` and ``last_end``, what a reset at ``i`` may cut (``Reach``); ``movable`` and
    ``recut``, the tokens it may cut and the cut itself; ``limit`` (default ``room``), what must fit
    whatever it costs; ``worth`` and ``gated``, whether a reset past ``room`` pays (cost mode)."""

    room: int
    share: Callable[[int], int]
    older_end: Callable[[int], int]
    last_end: Callable[[int], int]
    movable: Movable
    recut: Recut
    limit: int | None = None
    worth: Worth | None = None
    gated: bool = False
    # The room is a price line's (``gateway.conversation.room``), kept as a window's is: the switch to
    # first-sight forms cuts the older part for the task whatever it costs, and a reset made past the
    # room brings the total under it, the newest turn too if it must (what stays over is billed at the
    # tier). Past it, the gate still decides whether a reset pays.
    firm: bool = False
    # Where the provider's cache was cold (``gateway.conversation.warmth``): the whole prefix was
    # written again there anyway, so a cut there costs no extra write and is made whatever the gate
    # says, once the conversation has forms: ``repeats`` (the older outputs' lines a later message
    # repeats, ``gateway.conversation.repeats``), each message's new size at ``cold_level``.
    cold: frozenset[int] = frozenset()
    repeats: Callable[[int, int, Sequence[Level]], dict[int, int]] | None = None
    # A follow-up question's evidence block (``gateway.conversation.followups``): its tokens for
    # message ``i``, given the levels of the messages before it (``levels[:i]``; it reads no other),
    # asked when ``i`` first takes its first-sight form. After a reset a block leaves out what the
    # reset's forms hold, not what it dropped.
    evidence: Callable[[int, Sequence[Level]], int] | None = None
    # The same after a reset at ``i`` that kept message ``i`` at first sight: its blocks asked again.
    evidence_again: Callable[[int, Sequence[Level]], int] | None = None

    def block(self, i: int, levels: Sequence[Level]) -> int:
        """Tokens message ``i``'s first-sight form adds for its evidence (0: none)."""
        return 0 if self.evidence is None else self.evidence(i, levels)


def cold_level(i: int, end: int) -> Level:
    """The level of what a cold point ``i``'s cut over ``[0, end)`` left: never a reset's ``(i, end)``,
    which a reset at the same point may make after it."""
    return (i, -1 - end)


def scan(sizes: Sizes, constant: int, rules: Rules, snapshot_at: int = -1) -> Scan:
    """Levels for every message, within ``rules.limit`` (default ``rules.room``) if resets can make it
    fit. Past the room, a reset at ``i`` cuts ``[0, older_end(i))`` to what ``share(fixed)`` gives it;
    ``gated``, only when its ``worth`` is positive (always while over the limit); each reset's worth is
    kept in ``Scan.expected``. When that is not enough to fit the limit, ``[0, last_end(i))`` (the
    newest turn too) only as far as it needs, and when even that is not enough, short texts too (a
    window that small, or a long chat of short lines, leaves no choice), to the same share and at
    most the limit. ``snapshot_at``: the message after which ``Scan.snapshot`` is taken."""
    limit = rules.room if rules.limit is None else rules.limit
    walk = _Walk(Scan(total=constant), [], rules)
    result, current = walk.result, walk.current
    formed: list[int] = []  # first-sight sizes of every message, once needed
    switched = not sizes.verbatim_first
    weighed = 0  # the total at which a reset last did not pay
    for i, original in enumerate(sizes.original):
        if switched:
            formed = formed or list(sizes.first_sight())
            level, size = FIRST_SIGHT, formed[i] + rules.block(i, result.levels)
        else:
            level, size = ORIGINAL, original
        result.levels.append(level)
        current.append(size)
        result.total += size
        if switched and i in rules.cold and rules.repeats is not None:
            end = rules.older_end(i)
            walk.apply(i, cold_level(i, end), rules.repeats(i, end, result.levels))
        if result.total > rules.room:
            first = not switched
            if first:
                switched, formed = True, list(sizes.first_sight())
                _switch(result, current, formed, i, rules)
            # Under a line, the switch cuts the older part for the task as the window's does.
            forced = not rules.gated or result.total > limit or (rules.firm and first)
            if forced or result.total > weighed * RECONSIDER:
                worth = None if rules.worth is None else functools.partial(rules.worth, i)
                made = walk.reset(i, rules.older_end(i), rules.share, widen=rules.room, worth=worth,
                                  gated=not forced)
                if not made:
                    weighed = result.total
                elif switched and result.levels[i] == FIRST_SIGHT:  # its evidence, from what the reset kept
                    walk.reblock(i, formed[i])
                if made and rules.firm and result.total > rules.room:  # under a line, the newest turn too
                    walk.reset(i, rules.last_end(i), lambda fixed: rules.room - fixed, room=rules.room)
        if result.total > limit:  # the newest turn too, cut only as far as the limit needs
            walk.reset(i, rules.last_end(i), lambda fixed: limit - fixed, room=limit)
        if result.total > limit:  # still over (a long chat of short lines): short texts too
            walk.reset(i, rules.last_end(i), rules.share, room=limit, wide=True)
        if i == snapshot_at:
            result.snapshot = list(result.levels)
    return result


def _cramped(fixed: int, share: Callable[[int], int], room: int) -> bool:
    """Whether a reset that cannot cut ``fixed`` tokens would leave under ``HEADROOM`` of the room."""
    return room - (fixed + max(0, share(fixed))) < HEADROOM * room


def _switch(result: Scan, current: list[int], formed: list[int], i: int, rules: Rules) -> None:
    """The conversation first passes the trigger at ``i``: messages ``0..i`` take their first-sight
    forms (a reset point when that changes any), in order (a follow-up's evidence reads the levels
    before it)."""
    for j in range(i + 1):
        size = formed[j] + rules.block(j, result.levels)  # it reads levels[:j] only
        if size != current[j]:
            result.levels[j] = FIRST_SIGHT
            result.total -= current[j] - size
            current[j] = size
            if not result.points or result.points[-1] != i:
                result.points.append(i)


@dataclass
class _Walk:
    """A scan in progress: its result so far, each message's current tokens, and its rules."""

    result: Scan
    current: list[int]
    rules: Rules

    def reset(self, i: int, end: int, share: Callable[[int], int], room: int | None = None, *,
              wide: bool = False, widen: int | None = None, worth: Callable[[int, int], float] | None = None,
              gated: bool = False) -> bool:
        """Cut ``[0, end)`` again, once, within what ``share`` leaves it; not a reset when that saves
        nothing, or, ``gated``, when its ``worth`` (given the total before and about after) is not
        positive. With ``room``: the cut must fit it, so a cut that comes out larger than asked (its
        markers and placeholders are counted after the fact) is asked again for less. With ``widen``
        (the room): short texts too when the long ones alone are cramped (``HEADROOM``). Whether it
        reset."""
        result, movable = self.result, self.rules.movable
        if end <= 0:
            return False
        pool = movable(i, end, result.levels, wide)
        if widen is not None and not wide and _cramped(result.total - pool, share, widen):
            wide, pool = True, movable(i, end, result.levels, True)  # short texts too (``HEADROOM``)
        budget = max(0, share(result.total - pool))
        if pool <= budget:
            return False
        expected = worth(result.total, result.total - pool + budget) if worth is not None else None
        if gated and expected is not None and expected <= 0:
            return False
        sizes, _ = self._cut(i, end, budget, room, wide)
        if not self.apply(i, (i, end), sizes):
            return False
        if expected is not None:
            result.expected[i] = result.expected.get(i, 0.0) + expected
        return True

    def reblock(self, i: int, bare: int) -> None:
        """A reset at ``i`` kept message ``i`` (``bare`` tokens without its evidence): its evidence asked
        again, now that the reset's forms are what is sent of the documents."""
        if self.rules.evidence_again is None:
            return
        size = bare + self.rules.evidence_again(i, self.result.levels)
        self.result.total += size - self.current[i]
        self.current[i] = size

    def apply(self, i: int, level: Level, sizes: dict[int, int]) -> bool:
        """Messages ``sizes`` now at ``level``, with those sizes: a reset at ``i`` if that saves any."""
        result, current = self.result, self.current
        saved = sum(current[j] - size for j, size in sizes.items())
        if saved <= 0:
            return False  # nothing to gain: not a reset (it would change bytes for nothing)
        for j, size in sizes.items():
            result.levels[j], current[j] = level, size
        result.total -= saved
        if not result.points or result.points[-1] != i:
            result.points.append(i)
        return True

    def _cut(self, i: int, end: int, budget: int, room: int | None, wide: bool) -> tuple[dict[int, int], int]:
        """The recut within ``budget`` (asked again for less, at most ``FIT_TRIES`` times in all, while
        it does not fit ``room``): each cut message's new size, and the tokens saved."""
        result, current = self.result, self.current
        for _ in range(FIT_TRIES if room is not None else 1):
            sizes = self.rules.recut(i, end, budget, result.levels, wide)
            saved = sum(current[j] - size for j, size in sizes.items())
            over = result.total - saved - (room if room is not None else result.total)
            if over <= 0 or budget == 0:
                break
            budget = max(0, budget - over - over // 8)
        return sizes, saved


# -- what a reset may touch --------------------------------------------------------------------


def turn_ends(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Where earlier requests of this conversation ended (a message the assistant answered), and
    the end of this one."""
    ends = [i for i in range(len(messages) - 1)
            if messages[i].get("role") in ("user", "tool") and messages[i + 1].get("role") == "assistant"]
    return [*ends, len(messages) - 1]


def previous_end(messages: Sequence[dict[str, Any]], *, held_back: bool = False) -> int:
    """Where the previous request of this conversation ended (-1: none). ``held_back``: the rows of
    ``/v1/compress``, which LiteLLM sends without its assistant rows; there the previous request is
    the rows less the newest, which the caller added since."""
    ends = turn_ends(messages)
    if held_back and len(ends) == 1:  # no assistant row to end a turn at
        return len(messages) - 2
    return ends[-2] if len(ends) > 1 else -1


class Reach:
    """What a reset at message ``i`` may touch, for one request's messages, each answer in constant
    time (the scan asks at every message over the room): where the older part ends and where
    everything but the question ends, never from a checked thinking block on."""

    def __init__(self, messages: Sequence[dict[str, Any]]) -> None:
        roles = [m.get("role") for m in messages]
        self._user = _last(roles, "user")
        self._assistant = _last(roles, "assistant")
        self._turns = list(itertools.accumulate(role == "assistant" for role in roles))
        self._roles = roles
        thinking = [i for i, m in enumerate(messages) if roles[i] == "assistant" and shape.thinks(m)]
        self._thinking = [bisect.bisect_left(thinking, j) for j in range(len(messages))]
        self._thinking_at = [*thinking, len(messages) + 1]

    def older_end(self, i: int) -> int:
        """The end of the part a reset at ``i`` may harden: before the newest assistant message up to
        ``i`` (the newest turn stays as first sent), and before any assistant message that carries
        thinking blocks after the last user message (its provider checks what precedes it)."""
        return min(self._assistant[i], self.thinking_end(i))

    def thinking_end(self, i: int) -> int:
        """The first assistant message with thinking blocks since the last user message up to ``i``
        (``i + 1`` if none): its provider checks what precedes it, within the current tool loop."""
        first = self._thinking_at[self._thinking[self._user[i]]]
        return first if first <= i else i + 1

    def user(self, i: int) -> int:
        """The newest user message up to ``i`` (the task a reset at ``i`` works for): no reset cuts
        it (its first-sight form already keeps at most the cap, with its question), so the user's
        task is never a placeholder. -1 if there is none."""
        return self._user[i] if self._roles[self._user[i]] == "user" else -1

    def turns(self, i: int) -> int:
        """Turns answered up to ``i``: assistant messages, one per earlier request."""
        return self._turns[i]

    def last_end(self, i: int) -> int:
        """What a reset at ``i`` hardens when the older part is not enough: everything up to ``i`` but
        the last user message (the question), and still nothing from a checked thinking block on."""
        end = i if self._roles[i] == "user" else i + 1
        return min(end, self.thinking_end(i))


def _last(roles: list[Any], role: str) -> list[int]:
    """For each message, the index of the last one up to it with ``role`` (0 if none)."""
    out, last = [], 0
    for i, found in enumerate(roles):
        last = i if found == role else last
        out.append(last)
    return out
