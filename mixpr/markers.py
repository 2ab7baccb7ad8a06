"""Kept blocks -> text, each cut replaced by a marker that says what was removed and where, so an
agent can read it again with its own tools: ``[… lines 120–388 of sympy/matrices/common.py omitted …]``.

Lines are the file's own in a numbered view (``Blocks.numbered``), else the output's own ("output
lines"). A cut in grep output or a diff also names the files it removed (at most ``MAX_NAMES``)."""

from __future__ import annotations

import re

import numpy as np

from mixpr.kinds import Blocks

MAX_NAMES = 2
# A JSON item's key path, ``$.results[3]``, or a range of them, ``$.results[3–7]``.
_ITEM = re.compile(r"^(.*)\[(\d+)(?:–(\d+))?\]$")


def assemble(blocks: Blocks, keep: np.ndarray) -> str:
    """The kept blocks' text in order; a marker in place of every run of omitted blocks. Only the
    first marker names the file: the others are in the same one (a path can cost 25 tokens)."""
    text, parts, previous, named = blocks.text, [], -1, False
    for i in [*np.asarray(keep).tolist(), len(blocks)]:
        if i > previous + 1:
            parts.append(_placed(marker(blocks, previous + 1, i - 1, named=named), parts))
            named = True
        elif previous >= 0 and i < len(blocks):
            parts.append(text[blocks.ends[previous] : blocks.starts[i]])  # what lies between (prose: a space)
        if i < len(blocks):
            parts.append(text[blocks.starts[i] : blocks.ends[i]])
        previous = i
    return "".join(parts)


def _placed(note: str, parts: list[str]) -> str:
    """A marker on a line of its own after a line's end, else inline between spaces."""
    if not parts or parts[-1].endswith("\n"):
        return note + "\n"
    return f"\n{note}\n"


def marker(blocks: Blocks, first: int, last: int, *, named: bool = False) -> str:
    """The note for omitted blocks ``first``..``last``; ``named``: the path was given already."""
    a, b = int(blocks.first_line[first]), int(blocks.last_line[last])
    span = f"line {a}" if a == b else f"lines {a}–{b}"
    if a == b and _shares_line(blocks, first, last):
        span = f"part of line {a}"  # a piece of a long line (minified JSON) was cut, not the line
    if blocks.numbered:
        where = f"{span} of {blocks.path}" if blocks.path and not named else span
    else:
        where = span.replace("line", "output line", 1)
    return f"[… {where} omitted{_names(blocks.labels[first : last + 1])} …]"


def _shares_line(blocks: Blocks, first: int, last: int) -> bool:
    """Whether a kept block next to the cut holds another piece of the same line."""
    line = blocks.first_line[first]
    before = first > 0 and blocks.last_line[first - 1] == line
    after = last + 1 < len(blocks) and blocks.first_line[last + 1] == line
    return bool(before or after)


def _names(labels: list[str]) -> str:
    names = _ranges([name for name in dict.fromkeys(labels) if name])
    if not names:
        return ""
    more = f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else ""
    return ": " + ", ".join(names[:MAX_NAMES]) + more


def _ranges(names: list[str]) -> list[str]:
    """Consecutive items of one JSON array as one range: ``$.results[3–40]``."""
    out: list[str] = []
    for name in names:
        match = _ITEM.match(name)
        last = _ITEM.match(out[-1]) if out else None
        if match and last and match.group(1) == last.group(1):
            out[-1] = f"{last.group(1)}[{last.group(2)}–{match.group(3) or match.group(2)}]"
        else:
            out.append(name)
    return out
