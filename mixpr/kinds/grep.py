"""grep and find output, directory listings: one block per file (its matches), split when long.

A line names its file as ``path:line:text``, ``path:text`` or ``path-line-text`` (grep's context
lines); a listing line is a path itself. A block opens where the file (for listings: the directory)
changes, so a cut marker can name the files it removed."""

from __future__ import annotations

import re

import numpy as np

from mixpr.kinds import lines as ln

# A line names its file as ``path:line:text``, ``path:text`` or ``path-line-text``: the name is the
# shortest ``x.ext`` before such a suffix, else the longest ``dir/`` prefix and the shortest rest
# (what ``^(\S+?\.\w+|\S*/\S+?)(?::\d+[:-]|-\d+-|:)`` matches), found in one pass: the regex
# itself backtracks quadratically on a long run of slashes.
_WORD = re.compile(r"\w+")
_DASHED = re.compile(r"(?=-\d+-)")
_EXTENSION = re.compile(r"\S+\.\w{1,5}")
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
    named = _named(line)
    if named:
        return named
    match = _COUNTED.match(line)
    path = match.group(1) if match else _listed(line)
    return path.rstrip("/").rsplit("/", 1)[0] if path else ""


def _named(line: str) -> str:
    """The file of ``path:line:text``, ``path:text`` or ``path-line-text``; "" if none."""
    if not line or line[0].isspace():
        return ""
    head = line.split(None, 1)[0]
    ends = _suffixes(head)
    if not ends:
        return ""
    for dot in (i for i, c in enumerate(head) if c == "." and i >= 1):
        word = _WORD.match(head, dot + 1)
        if word and word.end() in ends:
            return head[: word.end()]
    return _under_directory(head, sorted(ends))


def _suffixes(head: str) -> set[int]:
    """Where a ``:``, ``:N:``, ``:N-`` or ``-N-`` suffix may start in a line's first word."""
    found = {i for i, c in enumerate(head) if c == ":"}
    found.update(m.start() for m in _DASHED.finditer(head))
    return found


def _under_directory(head: str, ends: list[int]) -> str:
    """The greedy ``dir/`` then the shortest rest before a suffix: the last slash with a suffix at
    least two characters after it, up to the first such suffix."""
    last = ends[-1]
    slash = head.rfind("/", 0, max(0, last - 1))
    if slash < 0:
        return ""
    first = next(e for e in ends if e >= slash + 2)
    return head[:first]


def _listed(line: str) -> str:
    """A listing line's path (one word, a slash in it or a short extension); "" if it is not one."""
    words = line.split()
    if len(words) != 1:
        return ""
    word = words[0]
    if "/" in word or "\\" in word:
        return word
    return word if _EXTENSION.fullmatch(word) else ""
