"""JSON: pretty-printed JSON by item, a block opening at each line that starts an item at the top two
levels, labelled with its key path (``$.results[3]``); one-line JSON is first cut at its items' commas.

The kept form is the original lines with markers between them, so it is readable, not re-parseable."""

from __future__ import annotations

import re

import numpy as np

from mixpr.kinds import lines as ln

_KEY = re.compile(r'^\s*"((?:[^"\\]|\\.)*)"\s*:')
MAX_LINES = 8
ITEM_DEPTH = 2


def split(text: str, source: str | None = None) -> ln.Blocks:
    lines = ln.lines_of(text)
    depths, paths = _depths_and_paths(lines)
    opens = depths <= ITEM_DEPTH
    pinned = np.zeros(len(lines), dtype=np.int8)
    ln.pin_ends(lines, pinned, head=1, tail=1)
    paths = ["" if piece or path == "$" else path for piece, path in zip(lines.continues, paths, strict=True)]
    return ln.blocks(lines, opens, pinned, max_lines=MAX_LINES, path=source, labels=paths)


def _depths_and_paths(lines: ln.Lines) -> tuple[np.ndarray, list[str]]:
    """Each line's nesting depth at its start, and the key path of the item it starts (or is inside)."""
    depth, stack, index, depths, paths = 0, [], [], [], []
    for i in range(len(lines)):
        line = lines.line(i)
        key = _KEY.match(line)
        if key and stack:
            stack[-1] = key.group(1)
        elif stack and index and index[-1] is not None and line.strip() not in ("]", "],", "}", "},"):
            index[-1] += 1
            stack[-1] = f"[{index[-1]}]"
        depths.append(depth)
        paths.append("$" + "".join(p if p.startswith("[") else f".{p}" for p in stack if p is not None))
        depth, stack, index = _after(_strings_removed(line), depth, stack, index)
    return np.asarray(depths, dtype=np.int64), paths


def _after(code: str, depth: int, stack: list, index: list):
    for char in code:
        if char in "[{":
            depth += 1
            stack.append(None)
            index.append(-1 if char == "[" else None)
        elif char in "]}" and stack:
            depth -= 1
            stack.pop()
            index.pop()
    return depth, stack, index


def _strings_removed(line: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)
