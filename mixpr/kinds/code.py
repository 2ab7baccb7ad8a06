"""Code and file views (``cat``, ``cat -n``, an editor's numbered view): blocks of lines that open on a
definition (``def``, ``class``, a Java method, a decorator), after a blank line or after a closing brace
at the outer levels, keeping the view's line numbers for the cut markers."""

from __future__ import annotations

import re
from dataclasses import replace

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
_PATH_IN_HEADER = re.compile(
    r"\[File: (\S+)|running `cat -n` on (\S+?):?\s*$|^(?:---|\+\+\+) (?:a/|b/)?(\S+)", re.MULTILINE
)
_HEADER_CHARS = 600
# Comments and docstrings: on the dev trajectories a block mostly of them held reused evidence half
# as often as other code (licence headers, Javadoc), so such a block ranks at this factor, unless it
# holds a definition (a ``def`` and its docstring).
COMMENT_WEIGHT = 0.5
COMMENT_SHARE = 0.5
_COMMENT_LINE = re.compile(r"^\s*(?:#|//|/\*|\*|<!--)")
_DOC_QUOTES = re.compile(r'"""|\'\'\'')


def split(text: str, source: str | None = None) -> ln.Blocks:
    lines = ln.lines_of(text)
    code = [_without_number(lines.line(i)) for i in range(len(lines))]
    empty = np.array([not c.strip() for c in code], dtype=bool)
    defines = np.array([bool(_DEFINITION.match(c)) for c in code], dtype=bool)
    opens = defines.copy()
    closed = np.array([bool(_CLOSING.match(c)) for c in code], dtype=bool)
    opens[1:] |= empty[:-1] & ~empty[1:]  # a paragraph of code after a blank line
    opens[1:] |= closed[:-1]
    pinned = np.zeros(len(lines), dtype=np.int8)
    ln.pin_ends(lines, pinned)
    found = ln.blocks(lines, opens, pinned, path=source or path_in_header(text))
    comments = ln.block_share(found, commentary(code)) > COMMENT_SHARE
    defines = ln.block_any(found, defines)
    return replace(found, prior=np.where(comments & ~defines, COMMENT_WEIGHT, 1.0))


def commentary(code: list[str]) -> np.ndarray:
    """True for comment lines and lines inside a block comment or a docstring (one pass, a state)."""
    found, inside, closing = np.zeros(len(code), dtype=bool), False, ""
    for i, line in enumerate(code):
        if inside:
            found[i] = True
            inside = closing not in line
            continue
        quotes = _DOC_QUOTES.search(line)
        if quotes and not line[: quotes.start()].strip():  # a docstring opens this line
            found[i] = True
            inside, closing = line.count(quotes.group()) == 1, quotes.group()
        elif _COMMENT_LINE.match(line):
            found[i] = True
            inside, closing = line.lstrip().startswith("/*") and "*/" not in line, "*/"
    return found


def _without_number(line: str) -> str:
    match = ln.NUMBERED.match(line)
    return line[match.end() :] if match else line


def path_in_header(text: str) -> str | None:
    """The file a view names in its first lines, if any."""
    match = _PATH_IN_HEADER.search(text, 0, _HEADER_CHARS)
    return next((g for g in match.groups() if g), None) if match else None
