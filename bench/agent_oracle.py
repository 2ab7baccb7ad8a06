"""Oracle cuts of an agent's tool outputs: the best any first-sight scorer could do at a size (issue #34).

A client-side baseline that reads the future: each tool output over :data:`ABOVE` characters keeps, first,
the whole lines holding strings a later step uses (the run's evidence entries whose ``msg`` is that
output and whose ``origin`` is ``tool``, the earliest use first), then its head and tail, equally, until
the kept text reaches ``size`` characters; what is left out becomes head+tail's omission marker. Cut
once, when the output arrives (append-only, cache-stable), like head+tail, at the same size: ``oracle``
at head+tail's 4,000 characters, ``oracle-2k`` at 2,000 (and, on request, ``oracle-1k`` and ``oracle-500``:
where the frontier lies below those).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from typing import Any

ABOVE = 4000  # outputs up to this many characters stay whole (as head+tail leaves them)
SIZES = {"oracle": 4000, "oracle-2k": 2000, "oracle-1k": 1000, "oracle-500": 500}
DEFAULT = ("oracle", "oracle-2k")  # in bench.agents' default list; the smaller ones on request
LABELS = {
    "oracle": "client oracle: outputs over 4,000 chars keep the lines later steps use, then head + tail",
    "oracle-2k": "client oracle at 2,000 chars (lines later steps use, then head + tail)",
    "oracle-1k": "client oracle at 1,000 chars",
    "oracle-500": "client oracle at 500 chars",
}

_NEWLINE = re.compile("\n")
Message = dict[str, Any]
Span = tuple[int, int]


def used_spans(evidence: dict[int, list[dict[str, Any]]]) -> dict[int, list[tuple[int, int, int]]]:
    """Per message index: ``(step, start, end)`` of each string a later step takes from it (tool origin)."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    for k, entries in evidence.items():
        for e in entries:
            if e["origin"] == "tool":
                out.setdefault(e["msg"], []).append((k, e["start"], e["end"]))
    return {m: sorted(spans) for m, spans in out.items()}


def _lines(text: str, start: int, end: int, starts: list[int]) -> Span:
    """The whole lines that ``text[start:end]`` touches (``starts``: where each line begins)."""
    first = starts[bisect.bisect_right(starts, start) - 1]
    after = text.find("\n", max(start, end - 1))
    return first, len(text) if after < 0 else after + 1


def _union(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        elif e > s:
            merged.append((s, e))
    return merged


def _size(spans: list[Span]) -> int:
    return sum(e - s for s, e in spans)


def kept_spans(text: str, uses: list[tuple[int, int, int]], size: int) -> list[Span]:
    """What the oracle keeps of ``text``: the used lines (earliest use first, each that still fits),
    then head and tail alike, at most ``size`` characters in all."""
    starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
    kept: list[Span] = []
    for _, start, end in uses:
        line = _lines(text, start, end, starts)
        if _size(_union([*kept, line])) <= size:
            kept = _union([*kept, line])
    lo, hi = 0, len(text) // 2 + 1  # the largest head = tail that keeps the total within size
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _size(_union([*kept, (0, mid), (len(text) - mid, len(text))])) <= size:
            lo = mid
        else:
            hi = mid - 1
    return _union([*kept, (0, lo), (len(text) - lo, len(text))])


def cut_text(text: str, spans: list[Span]) -> str:
    """The kept spans, each gap replaced by head+tail's marker (on a line of its own)."""
    out, at = [], 0
    for s, e in [*spans, (len(text), len(text))]:
        if s > at:
            marker = f"[... {s - at} characters omitted ...]"
            before = "\n" if at and text[at - 1] != "\n" else ""
            out.append(before + marker + ("\n" if s < len(text) else ""))
        out.append(text[s:e])
        at = max(at, e)
    return "".join(out)


def oracle(messages: list[Message], evidence: dict[int, list[dict[str, Any]]],
           size: int) -> Callable[[list[Message], list[dict[str, Any]]], tuple[list[Message], list[dict]]]:
    """A client for one run: cuts each long tool output of ``messages[:k]`` once, as it first arrives."""
    uses = used_spans(evidence)
    cut: dict[int, Message] = {}

    def client(request: list[Message], tools: list[dict[str, Any]]) -> tuple[list[Message], list[dict]]:
        out = []
        for i, m in enumerate(request):
            text = m.get("content")
            if m["role"] == "tool" and isinstance(text, str) and len(text) > ABOVE:
                if i not in cut:
                    cut[i] = {**m, "content": cut_text(text, kept_spans(text, uses.get(i, []), size))}
                m = cut[i]
            out.append(m)
        return out, tools

    return client
