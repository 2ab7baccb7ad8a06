"""grep and find output, directory listings: one block per file (its matches), split when long.

A line names its file as ``path:line:text``, ``path:text`` or ``path-line-text`` (grep's context
lines); a listing line is a path itself. A block opens where the file (for listings: the directory)
changes, so a cut marker can name the files it removed."""

from __future__ import annotations

import re

import numpy as np

from mixpr.kinds import lines as ln

_MATCH = re.compile(r"^(\S+?\.\w+|\S*/\S+?)(?::\d+[:-]|-\d+-|:)")
_PATH = re.compile(r"^\s*(\S*[/\\]\S*|\S+\.\w{1,5})/?\s*$")
# SWE-agent's search_dir: ``/repo/a/b.py (2 matches)``.
_COUNTED = re.compile(r"^(\S+) \(\d+ match(?:es)?\)\s*$")


def split(text: str, source: str | None = None) -> ln.Blocks:
    lines = ln.lines_of(text)
    files = [file_of(lines.line(i)) for i in range(len(lines))]
    opens = np.array([i == 0 or files[i] != files[i - 1] for i in range(len(files))], dtype=bool)
    opens |= ln.blank(lines)
    pinned = np.zeros(len(lines), dtype=np.int8)
    ln.pin_ends(lines, pinned, head=1, tail=1)
    return ln.blocks(lines, opens, pinned, path=source, labels=files)


def file_of(line: str) -> str:
    """The file a grep line names, or a listed path's directory; "" for other lines."""
    match = _MATCH.match(line)
    if match:
        return match.group(1)
    match = _COUNTED.match(line) or _PATH.match(line)
    if match:
        return match.group(1).rstrip("/").rsplit("/", 1)[0]
    return ""
