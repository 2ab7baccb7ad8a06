"""Lines and line blocks: the units every content kind but prose is cut into.

A kind's splitter says, per line of the text, whether a block opens there (a ``def``, a new file in grep
output, a hunk) and whether the line is pinned (an error line, the output's header); ``blocks`` turns that
into spans. Work is one pass over the lines: linear in the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

# A block longer than this many lines is cut anyway: a 300-line function is not one unit of evidence,
# and finer blocks let the budget go to the lines that match.
MAX_BLOCK_LINES = 8
# A numbered file view: SWE-agent's ``12:code``, ``cat -n``'s ``    12\tcode``, ``grep -n``'s context
# line ``12-code`` (not ``2024-01-02``: a date is no line number).
NUMBERED = re.compile(r"^ {0,8}(\d{1,7})(?::|\t|-(?!\d))")


# A line longer than this (minified JSON, a base64 blob, a long log record) is cut into pieces of
# about this many characters, at a comma or a space when one is near, so the budget can still cut it.
LONG_LINE = 800


@dataclass(frozen=True)
class Lines:
    """The text's lines: line i is ``text[starts[i]:ends[i]]`` (its newline included). A long line is
    several pieces: ``numbers`` holds each piece's 1-based line number, ``continues`` marks the pieces
    after a line's first."""

    text: str
    starts: np.ndarray
    ends: np.ndarray
    numbers: np.ndarray
    continues: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def line(self, i: int) -> str:
        return self.text[self.starts[i] : self.ends[i]]

    def all(self) -> list[str]:
        return self.text.splitlines(keepends=True)


def lines_of(text: str, *, long_line: int = LONG_LINE) -> Lines:
    ends = [m.end() for m in re.finditer("\n", text)]
    if not ends or ends[-1] != len(text):
        ends.append(len(text))
    if not text:
        ends = []
    starts, numbers, continues = [], [], []
    for number, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True), start=1):
        for piece, at in enumerate(_pieces(text, start, end, long_line)):
            starts.append(at)
            numbers.append(number)
            continues.append(piece > 0)
    starts_array = np.asarray(starts, dtype=np.int64)
    ends_array = np.append(starts_array[1:], len(text)) if starts else starts_array
    numbers_array = np.asarray(numbers, dtype=np.int64)
    return Lines(text, starts_array, ends_array, numbers_array, np.asarray(continues, dtype=bool))


def _pieces(text: str, start: int, end: int, long_line: int) -> list[int]:
    """Where the pieces of the line ``[start, end)`` start: just ``[start]`` unless it is long."""
    found = [start]
    while end - found[-1] > long_line:
        at = found[-1]
        window = (at + long_line // 2, at + long_line)
        soft = max(text.rfind(", ", *window), text.rfind(" ", *window))
        found.append(soft + 1 if soft > 0 else at + long_line)
    return found


@dataclass(frozen=True)
class Blocks:
    """Runs of whole lines covering the text, in order.

    ``first_line``/``last_line``: 1-based line numbers of each block's first and last line, as the cut
    markers name them: the file's own numbers in a numbered view (``numbered``), else the output's lines.
    ``pinned``: per block, 0 or how firmly it is pinned: pinned blocks are kept first, the higher
    level first (a log's failure lines, 2, before its head and tail, 1), best score first within one.
    ``labels``: per block, what it belongs to (a file in grep output or a diff), or "" when nothing.
    ``path``: the file the whole text shows, when known (from the text or the caller's hint).
    ``prior``: per block, a factor on its rank score (1: none): a kind's knowledge of what is rarely
    reused (a code file's comments). ``first_row``: the index of each block's first line."""

    text: str
    starts: np.ndarray
    ends: np.ndarray
    first_line: np.ndarray
    last_line: np.ndarray
    pinned: np.ndarray
    numbered: bool = False
    path: str | None = None
    labels: list[str] = field(default_factory=list)
    prior: np.ndarray | None = None
    first_row: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.starts)

    def texts(self) -> list[str]:
        return [self.text[s:e] for s, e in zip(self.starts.tolist(), self.ends.tolist(), strict=True)]


def blocks(
    lines: Lines,
    opens: np.ndarray,
    pinned: np.ndarray,
    *,
    max_lines: int = MAX_BLOCK_LINES,
    path: str | None = None,
    labels: list[str] | None = None,
) -> Blocks:
    """Group lines into blocks: a block opens where ``opens`` says, at every pinned line and the line
    after one (a pinned line is a block of its own), at every piece of a long line, and after
    ``max_lines`` lines."""
    n = len(lines)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Blocks(lines.text, empty, empty, empty, empty, np.zeros(0, dtype=np.int8), path=path)
    pinned = np.asarray(pinned, dtype=np.int8)
    cut = np.asarray(opens, dtype=bool).copy()
    cut[0] = True
    cut |= pinned > 0
    cut[1:] |= pinned[:-1] > 0
    cut |= lines.continues  # each piece of a long line is a block: it alone can fill a budget
    first = _with_max_length(np.flatnonzero(cut), n, max_lines)
    last = np.append(first[1:], n) - 1
    numbers, numbered = line_numbers(lines)
    block_labels = [labels[i] for i in first.tolist()] if labels is not None else [""] * len(first)
    return Blocks(
        lines.text, lines.starts[first], lines.ends[last], numbers[first], numbers[last],
        pinned[first], numbered, path, block_labels, None, first,
    )  # fmt: skip


def block_share(blocks: Blocks, flags: np.ndarray) -> np.ndarray:
    """Per block, the share of its lines for which ``flags`` is true."""
    first = blocks.first_row
    sizes = np.diff(np.append(first, len(flags)))
    return np.add.reduceat(np.asarray(flags, dtype=np.float64), first) / sizes


def block_any(blocks: Blocks, flags: np.ndarray) -> np.ndarray:
    """Per block, whether ``flags`` is true for any of its lines."""
    return np.logical_or.reduceat(np.asarray(flags, dtype=bool), blocks.first_row)


def _with_max_length(first: np.ndarray, n: int, max_lines: int) -> np.ndarray:
    """``first`` (sorted block starts) with extra starts every ``max_lines`` lines inside longer blocks."""
    sizes = np.diff(np.append(first, n))
    pairs = zip(first.tolist(), sizes.tolist(), strict=True)
    extra = [np.arange(f + max_lines, f + size, max_lines) for f, size in pairs if size > max_lines]
    return np.unique(np.concatenate([first, *extra])) if extra else first


def line_numbers(lines: Lines) -> tuple[np.ndarray, bool]:
    """Each line's number as a marker names it, and whether they are the file's own (a numbered view).

    A numbered view's unnumbered lines (its header, a wrapped line) take the number of the last numbered
    line before them (or the next one's, before the first), so a range stays in file lines."""
    n = len(lines)
    shown = np.full(n, -1, dtype=np.int64)
    for i in np.flatnonzero(~lines.continues).tolist():
        match = NUMBERED.match(lines.line(i))
        if match:
            shown[i] = int(match.group(1))
    if (shown >= 0).sum() < max(3, 0.5 * n):
        return lines.numbers, False
    have = np.flatnonzero(shown >= 0)
    before = np.searchsorted(have, np.arange(n), side="right") - 1
    filled = np.where(before >= 0, shown[have[np.maximum(before, 0)]], shown[have[0]])
    return filled, True


def pin_ends(lines: Lines, pinned: np.ndarray, *, head: int = 2, tail: int = 2, max_chars: int = 300) -> None:
    """Pin the output's first ``head`` and last ``tail`` lines when short: the envelope a tool wraps its
    output in (``[File: … (1084 lines total)]``, ``<returncode>1</returncode>``, ``(984 more lines
    below)``, pytest's summary) says what the output is. They are pinned at level 1: a line pinned
    higher already keeps its level."""
    n = len(lines)
    for i in [*range(min(head, n)), *range(max(0, n - tail), n)]:
        if lines.ends[i] - lines.starts[i] <= max_chars:
            pinned[i] = max(pinned[i], 1)


def blank(lines: Lines) -> np.ndarray:
    """True for whitespace-only lines."""
    return np.array([not lines.line(i).strip() for i in range(len(lines))], dtype=bool)
