"""Code and file views (``cat``, ``cat -n``, an editor's numbered view): blocks of lines that open on a
definition (``def``, ``class``, a Java method, a decorator), after a blank line or after a closing brace
at the outer levels, keeping the view's line numbers for the cut markers."""

from __future__ import annotations

import re

import numpy as np

from mixpr.kinds import lines as ln

# A definition's first line, after the view's line number: the places a reader jumps to.
_DEFINITION = re.compile(
    r"^\s{0,8}(?:@\w|(?:async\s+)?def\s|class\s|func\s|fn\s|function\s|interface\s|enum\s|struct\s|impl\s"
    r"|(?:(?:public|private|protected|static|final|abstract|export|pub|override)\s+)+\w)"
)
_CLOSING = re.compile(r"^\s{0,4}[}\])];?\s*$")
# Where a view says which file it shows: SWE-agent's ``[File: /a/b.py (120 lines total)]``, the
# OpenHands editor's ``Here's the result of running `cat -n` on /a/b.py:``.
_PATH_IN_HEADER = re.compile(r"\[File: (\S+)|running `cat -n` on (\S+?):?\s*$|^(?:---|\+\+\+) (?:a/|b/)?(\S+)", re.M)
_HEADER_CHARS = 600


def split(text: str, source: str | None = None) -> ln.Blocks:
    lines = ln.lines_of(text)
    code = [_without_number(lines.line(i)) for i in range(len(lines))]
    empty = np.array([not c.strip() for c in code], dtype=bool)
    opens = np.array([bool(_DEFINITION.match(c)) for c in code], dtype=bool)
    closed = np.array([bool(_CLOSING.match(c)) for c in code], dtype=bool)
    opens[1:] |= empty[:-1] & ~empty[1:]  # a paragraph of code after a blank line
    opens[1:] |= closed[:-1]
    pinned = np.zeros(len(lines), dtype=bool)
    ln.pin_ends(lines, pinned)
    return ln.blocks(lines, opens, pinned, path=source or path_in_header(text))


def _without_number(line: str) -> str:
    match = ln.NUMBERED.match(line)
    return line[match.end() :] if match else line


def path_in_header(text: str) -> str | None:
    """The file a view names in its first lines, if any."""
    match = _PATH_IN_HEADER.search(text, 0, _HEADER_CHARS)
    return next((g for g in match.groups() if g), None) if match else None
