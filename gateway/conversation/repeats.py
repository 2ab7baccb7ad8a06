"""A cold turn's cuts (``gateway.conversation.cold``), as text: lines of older tool outputs that a later
message repeats word for word, and the agent's older notes cut to their first paragraph.

An agent reads the same file, the same test log, the same grep again and again, so much of an older
output is sent twice. Where the provider's cache is cold (``gateway.conversation.warmth``) the whole
prefix is written again anyway; dropping the earlier copies then costs no extra write, and loses
nothing the model could read: every dropped line is still in the request, later. A cut made for the
task (``gateway.conversation.recut``) at the same point lost a fifth of the facts the agent's next
steps used (dev split, issue 46).

The cut of one output is a pure function of its text and of the lines sent after it (up to the cold
point), so every later request makes it again. Runs of repeated lines shorter than ``MIN_RUN_CHARS``
stay (their marker would save nothing). Two lines are copies when they are equal but for a file
view's line number (``key``): an edit above a line renumbers it in the next view.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MIN_LINE_CHARS = 8  # a shorter line ("}", "else:") is not worth a lookup, nor a fact of its own
MIN_RUN_CHARS = 60  # a run of repeated lines shorter than this stays: its marker would cost as much
NOTES_CHARS = 300  # what an older note of the agent's keeps at most: its first paragraph
ACTION_CHARS = 2000  # ... and the fenced command it ends with, when no longer than this
# A fenced block at the very end of a note (no fence inside it): a text-based agent's action.
_ACTION = re.compile(r"```[^\n`]*\n(?:(?!```).)*```\s*\Z", re.DOTALL)
# A file view's line number ("  12\t" of ``cat -n``, "12:" of an editor's view): an edit above a line
# moves it, and the next view of the file repeats the line under another number.
_NUMBER = re.compile(r"\A\d{1,7}(?:\t|:)")


def key(line: str) -> str:
    """What makes two lines copies of each other: the line stripped, without a view's line number."""
    stripped = line.strip()
    return _NUMBER.sub("", stripped, count=1).strip() if stripped[:1].isdigit() else stripped


def lines_of(text: str) -> set[str]:
    """The lines of ``text`` a later copy makes redundant (their ``key``, long enough)."""
    return {found for line in text.split("\n") if len(found := key(line)) >= MIN_LINE_CHARS}


def without_repeats(text: str, later: set[str]) -> str | None:
    """``text`` without its runs of lines that ``later`` holds (each run becomes one marker line);
    None when nothing is dropped."""
    out: list[str] = []
    run: list[str] = []
    dropped = False
    for line in [*text.split("\n"), None]:
        if line is not None and len(found := key(line)) >= MIN_LINE_CHARS and found in later:
            run.append(line)
            continue
        dropped |= _flush(run, out)
        run = []
        if line is not None:
            out.append(line)
    return "\n".join(out) if dropped else None


def _flush(run: list[str], out: list[str]) -> bool:
    """Put ``run`` (repeated lines) into ``out``: one marker if it is long enough, else as it was."""
    if sum(len(line) for line in run) < MIN_RUN_CHARS:
        out.extend(run)
        return False
    out.append(f"[... {len(run)} lines repeated below ...]")
    return True


def cut(texts: Iterable[tuple[str, bool]]) -> list[str | None]:
    """For texts in message order (each with whether it may be cut), each cuttable one without the
    lines a later text holds (after that one's own cut), or None when it keeps every line."""
    items = list(texts)
    later: set[str] = set()
    out: list[str | None] = [None] * len(items)
    for number in range(len(items) - 1, -1, -1):
        text, cuttable = items[number]
        if cuttable:
            out[number] = without_repeats(text, later)
        later |= lines_of(out[number] if out[number] is not None else text)
    return out


def notes(text: str) -> str | None:
    """One of the agent's older notes cut to its first paragraph (at most ``NOTES_CHARS``: what it set
    out to do), a marker, and the fenced block it ends with, if any (a text-based agent's command,
    whose output follows: mini-swe-agent, SWE-agent); None when that saves too little."""
    first = text.strip().split("\n\n", 1)[0][:NOTES_CHARS]
    found = _ACTION.search(text)
    action = found.group(0).strip() if found and len(found.group(0)) <= ACTION_CHARS else ""
    if action and action in first:
        action = ""
    if len(text) - len(first) - len(action) < 2 * MIN_RUN_CHARS:
        return None
    marker = f"[... {text.count(chr(10)) + 1} lines of the agent's earlier notes omitted ...]"
    return "\n".join(part for part in (first, marker, action) if part)
