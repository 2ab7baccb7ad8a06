"""Unified diffs: one block per hunk (split when long), each file's header pinned, labelled by file."""

from __future__ import annotations

import re

import numpy as np

from mixpr.kinds import lines as ln

_FILE = re.compile(r"^(?:diff --git |--- |\+\+\+ |Index: )")
_TARGET = re.compile(r"^\+\+\+ (?:b/)?(\S+)|^diff --git a/\S+ b/(\S+)")
MAX_LINES = 12


def split(text: str, source: str | None = None) -> ln.Blocks:
    lines = ln.lines_of(text)
    headers = np.array([bool(_FILE.match(lines.line(i))) for i in range(len(lines))], dtype=bool)
    hunks = np.array([lines.line(i).startswith("@@") for i in range(len(lines))], dtype=bool)
    labels = _files(lines)
    pinned = headers.astype(np.int8)
    ln.pin_ends(lines, pinned, head=1, tail=1)
    return ln.blocks(lines, headers | hunks, pinned, max_lines=MAX_LINES, path=source, labels=labels)


def _files(lines: ln.Lines) -> list[str]:
    """For each line, the file its hunk changes (the last ``+++``/``diff --git`` header before it)."""
    current, found = "", []
    for i in range(len(lines)):
        match = _TARGET.match(lines.line(i))
        if match:
            current = match.group(1) or match.group(2)
        found.append(current)
    return found
