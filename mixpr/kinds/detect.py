"""Which kind of content a text is, from its first lines: cheap (at most ``SAMPLE_LINES`` lines are
read, plus one ``json.loads`` when the text starts like JSON) and deterministic.

Order matters: a diff holds code, a numbered view holds code and maybe "error", grep output names
files; so diff, JSON and numbered views are recognised by their shape first, then a test run (its
banner, a traceback), then grep output, a log by its failure lines, code by its syntax. What is left
is prose when its lines read as sentences, else a log (installers, builds: head, tail, failures)."""

from __future__ import annotations

import json
import re

from mixpr.kinds import lines as ln
from mixpr.kinds.grep import file_of
from mixpr.kinds.log import FAILURE

SAMPLE_LINES = 200
_DIFF = re.compile(r"^(?:diff --git |@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@|\+\+\+ \S|--- \S)")
_LOG = re.compile(
    r"test session starts|^=+ .* =+$|^-+ .* -+$|\b(?:PASSED|FAILED|ERROR|OK|passed|failed)\b"
    r"|^\[?\d{4}-\d\d-\d\d[ T]"
    r"|^(?:INFO|WARN(?:ING)?|DEBUG|ERROR)\b|^\s*at [\w$.]+\(|^Ran \d+ tests?|\[(?:INFO|WARNING|ERROR)\]"
)
_CODE = re.compile(
    r"^\s*(?:def |class |import |from \S+ import |return\b|if .*:$|for .*:$|#include|package |public "
    r"|private |protected |func |fn |const |let |var |@\w|self\.|#|//|/?\*)|[;{}(,:]\s*$|^\s*[}\])]"
    r"|^\s*[\w.]+(?:\[[^]]*\])? [-+*/]?= "
)
# A test runner's banner or summary, a traceback: a log whatever else its lines hold (pytest's
# ``tests/a.py::test_x PASSED`` lines would otherwise read as grep output).
_RUNNER = re.compile(
    r"test session starts|^Ran \d+ tests? in|^Traceback \(most recent call last\)|^(?:FAILED|ERROR|PASSED) \S"
    r"|\S::\S+ (?:PASSED|FAILED|ERROR|SKIPPED)|^=+ (?:FAILURES|ERRORS|short test summary info) =+$"
    r"|^Tests run: \d+|^\[(?:INFO|ERROR)\] (?:BUILD|Tests run)"
)
# Prose is sentences: long lines, most of them ending like one.
PROSE_LINE_CHARS = 60


def detect(text: str) -> str:
    """One of "diff", "json", "code", "grep", "log", "prose"."""
    head = text[: 200 * SAMPLE_LINES]
    sample = head.lstrip().splitlines()[:SAMPLE_LINES]
    body = [line for line in sample if line.strip()]
    if not body:
        return "prose"
    if _share(body, lambda s: bool(_DIFF.match(s))) >= 0.02 and any(s.startswith("@@") for s in body):
        return "diff"
    if text.lstrip()[:1] in "[{" and _is_json(text):
        return "json"
    numbered = _share(body, lambda s: bool(ln.NUMBERED.match(s)))
    if numbered >= 0.5:
        return "code"
    return _by_lines(body)


def _by_lines(body: list[str]) -> str:
    if any(_RUNNER.search(line) for line in body):
        return "log"
    logged = _share(body, lambda s: bool(_LOG.search(s) or FAILURE.search(s)))
    coded = _share(body, lambda s: bool(_CODE.search(s)))
    filed = _share(body, lambda s: bool(file_of(s)))
    if filed >= 0.6 and filed >= coded:
        return "grep"
    if logged >= 0.1 and logged >= coded / 2:
        return "log"
    if coded >= 0.25:
        return "code"
    if filed >= 0.4:
        return "grep"
    return "prose" if _sentences(body) else "log"


def _sentences(body: list[str]) -> bool:
    """Lines of prose: long on average, or mostly ending a sentence. Other line-oriented output
    (installers, build steps) is read as a log: its head, its tail and its failures."""
    mean = sum(len(line) for line in body) / len(body)
    return mean >= PROSE_LINE_CHARS or _share(body, lambda s: s.rstrip().endswith((".", "!", "?"))) >= 0.5


def _share(lines: list[str], test) -> float:
    return sum(1 for line in lines if test(line)) / len(lines)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # nested past Python's limit: read as text
        return False
    return True
