"""Logs and test output: error, failure, traceback and assertion lines are pinned (kept first), and
so are the head (what ran) and the tail (the summary); the rest is cut into short runs of lines."""

from __future__ import annotations

import re

import numpy as np

from mixpr.kinds import lines as ln

# What a reader of a failing run looks for: the exception, the failed test, the assertion, the frame
# (``File "x.py", line 3``, ``x.py:12: in f``), pytest's ``E   `` lines and its ``>`` line.
FAILURE = re.compile(
    r"\b(?:error|exception|traceback|fail(?:ed|ure|s)?|assert\w*|fatal|panic|segmentation fault)\b"
    r"|^E {2,}|^>\s|^\s*File \"[^\"]+\", line \d+|^\S+\.\w+:\d+: (?:in \w|error)",
    re.IGNORECASE,
)
# Failure lines outrank the head and tail when the pinned lines alone exceed the budget.
FAILURE_LEVEL = 2
HEAD_LINES = 4
TAIL_LINES = 6
MAX_LINES = 4


def split(text: str, source: str | None = None) -> ln.Blocks:
    lines = ln.lines_of(text)
    failures = [bool(FAILURE.search(lines.line(i))) for i in range(len(lines))]
    pinned = np.where(failures, FAILURE_LEVEL, 0).astype(np.int8)
    ln.pin_ends(lines, pinned, head=HEAD_LINES, tail=TAIL_LINES)
    opens = ln.blank(lines)
    return ln.blocks(lines, opens, pinned, max_lines=MAX_LINES, path=source)
