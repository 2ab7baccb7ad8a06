"""Scores for a compressed sample: needle recall (single/multi-hop) and top-word overlap (global tasks)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from bench.tasks import Sample
from bench.tasks.ruler_words import NOISE_WORD

TOP_K = {"cwe": 10, "fwe": 3}
_NUMBERED_ITEM = re.compile(r"(?:^|\s)\d+\.\s+(\S+)")
_CODED_WORD = re.compile(r"[a-z]+")


def needle_recall(sample: Sample, kept_text: str) -> float:
    """Fraction of the sample's needles that survive verbatim (substring) in the compressed text."""
    if not sample.needles:
        return 1.0
    return sum(n in kept_text for n in sample.needles) / len(sample.needles)


def span_recall(sample: Sample, spans: Sequence[tuple[int, int]]) -> float:
    """Diagnostic twin of needle_recall: a needle counts if some occurrence lies inside one kept span.

    Tells apart 'the chunk was dropped' from 'the chunk was kept but the join mangled it'.
    """
    if not sample.needles:
        return 1.0
    found = 0
    for needle in sample.needles:
        start = sample.text.find(needle)
        while start >= 0 and not any(a <= start and start + len(needle) <= b for a, b in spans):
            start = sample.text.find(needle, start + 1)
        found += start >= 0
    return found / len(sample.needles)


def list_words(text: str, task: str) -> list[str]:
    """The list words of a cwe/fwe context: numbered items for cwe, coded words minus '...' for fwe."""
    if task == "cwe":
        return _NUMBERED_ITEM.findall(text)
    return [w for w in text.split() if w != NOISE_WORD and _CODED_WORD.fullmatch(w)]


def top_words(text: str, task: str, k: int | None = None) -> list[str]:
    counts = Counter(list_words(text, task))
    return [w for w, _ in counts.most_common(k or TOP_K[task])]


def kept_context(sample: Sample, spans: Sequence[tuple[int, int]]) -> str:
    """The kept parts of the sample's context (spans clipped to it), newline-joined so words never fuse.

    Counting only inside the context keeps the one-shot example and the template out of the tally.
    """
    lo, hi = sample.context_span
    pieces = [sample.text[max(a, lo) : min(b, hi)] for a, b in sorted(spans) if min(b, hi) > max(a, lo)]
    return "\n".join(pieces)


def top_word_overlap(sample: Sample, spans: Sequence[tuple[int, int]]) -> float:
    """|top-k(full context) ∩ top-k(kept context)| / k."""
    k = TOP_K[sample.task]
    lo, hi = sample.context_span
    reference = set(top_words(sample.text[lo:hi], sample.task, k))
    kept = set(top_words(kept_context(sample, spans), sample.task, k))
    return len(reference & kept) / k


def score(sample: Sample, kept_text: str, spans: Sequence[tuple[int, int]]) -> float:
    """The headline number for one sample: overlap for global tasks, needle recall otherwise."""
    if sample.family == "global":
        return top_word_overlap(sample, spans)
    return needle_recall(sample, kept_text)
