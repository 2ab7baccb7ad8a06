"""Chats and multi-hop questions for ``bench.real_docs`` (issue #17; protocol: ../shared/data/real/README.md).

Each set turns its dev file into ``Case``s: the text the compressor gets (context, a blank line, the
question) and the character spans of the evidence, with the rule that scores them:

- ``locomo``: the whole chat; every annotated evidence turn kept (``all``); budgets 1,000 and 4,000.
- ``topic``: the whole chat; some case-insensitive occurrence of the topic name kept (``any``); 1,000.
- ``hotpot``: the question's 10 paragraphs shuffled among whole paragraphs of other questions until about
  64,000 characters; every supporting sentence kept (``all``); 1,000. Yes/no answers are skipped.
- ``musique``: the same with its 20 paragraphs; every supporting paragraph kept (``all``); 2,000.
- ``qmsum``: the whole transcript; the share of the query's evidence characters kept (``share``); 2,000.
- ``locomo-messages``: LoCoMo's chats sent as messages (``bench.chat_messages``), scored as ``locomo``.

"Kept" is the real-document rule: at least 90% of a span's characters inside ``Compressed.spans``.
``quick`` keeps every ``QUICK_STRIDE``-th question of a set, so a fast run still sees every chat.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from bench import chat_messages
from bench.data import data_dir

FILES = {
    "locomo": "locomo.dev.jsonl",
    "topic": "topic_retrieval_longchat.dev.jsonl",
    "hotpot": "multihop_hotpotqa.dev.json",
    "musique": "multihop_musique.dev.json",
    "qmsum": "qmsum.dev.jsonl",
    "locomo-messages": "locomo.dev.jsonl",
}
# set -> (setting name, budgets)
SETTINGS = {
    "locomo": ("chat", (1000, 4000)),
    "topic": ("chat", (1000,)),
    "hotpot": ("haystack", (1000,)),
    "musique": ("haystack", (2000,)),
    "qmsum": ("transcript", (2000,)),
    "locomo-messages": ("messages", (1000, 4000)),
}
# Other forms of a set above (not in the default run or the means): the same questions, sent differently.
FORMS = {"locomo-messages": "locomo"}
HAYSTACK_CHARS = 64_000
COVERED = 0.9
QUICK_STRIDE = 4
_SKIPPED_ANSWERS = {"yes", "no"}


@dataclass(frozen=True)
class Case:
    """One question over one compressor input; ``evidence``: character spans scored by ``rule``."""

    file: str
    doc: int
    question: str
    text: str
    evidence: tuple[tuple[int, int], ...]
    rule: str  # "any" | "all" | "share"
    # Set when the text is a chat sent as messages: what the gateway passes MixPR beside the text.
    boundaries: tuple[int, ...] = ()
    query_span: tuple[int, int] | None = None


def load(name: str) -> list[dict]:
    path = data_dir() / "real" / FILES[name]
    raw = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(raw)
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def cases(name: str, *, quick: bool = False) -> list[Case]:
    found = list(_BUILDERS[name](load(name)))
    return found[::QUICK_STRIDE] if quick else found


def _with_question(context: str, question: str) -> str:
    return f"{context}\n\n{question.strip()}"


def _annotated(name: str, rule: str, rows: list[dict]) -> Iterator[Case]:
    """Whole-text sets whose questions carry their evidence spans (LoCoMo turns, QMSum turn ranges)."""
    for doc, row in enumerate(rows):
        for question, spans in zip(row["instructions"], row["evidence_spans"], strict=True):
            if spans:
                text = _with_question(row["input"], question)
                yield Case(name, doc, question, text, tuple(map(tuple, spans)), rule)


def _messages(rows: list[dict]) -> Iterator[Case]:
    """LoCoMo's chats sent as messages through the gateway's stream (``bench.chat_messages``)."""
    for doc, row in enumerate(rows):
        for question, spans in zip(row["instructions"], row["evidence_spans"], strict=True):
            if spans:
                sent = chat_messages.send(row["input"], question, spans)
                yield Case("locomo-messages", doc, question.strip(), sent.text, sent.evidence, "all",
                           sent.boundaries, sent.query_span)  # fmt: skip


def _topic(rows: list[dict]) -> Iterator[Case]:
    for doc, row in enumerate(rows):
        lowered = row["input"].lower()
        for question, topic in zip(row["instructions"], row["outputs"], strict=True):
            found = tuple((m.start(), m.end()) for m in re.finditer(re.escape(topic.lower()), lowered))
            if found:
                yield Case("topic", doc, question, _with_question(row["input"], question), found, "any")


def _hotpot(items: list[dict]) -> Iterator[Case]:
    return _multihop("hotpot", items)


def _musique(items: list[dict]) -> Iterator[Case]:
    return _multihop("musique", items)


def _multihop(name: str, items: list[dict]) -> Iterator[Case]:
    for doc, item in enumerate(items):
        if item["answer"].strip().lower() in _SKIPPED_ANSWERS:
            continue
        paragraphs = _haystack(name, doc, items)
        context, sentence_spans = _join_paragraphs(paragraphs)
        wanted = [(title, i) for title, i in item["supporting"]]
        evidence = tuple(sentence_spans[key] for key in wanted if key in sentence_spans)
        if len(evidence) == len(wanted):  # a few HotpotQA facts point past their paragraph's end
            yield Case(name, doc, item["question"].strip(), _with_question(context, item["question"]),
                       evidence, "all")  # fmt: skip


def _haystack(name: str, doc: int, items: list[dict]) -> list[tuple[str, list[str], bool]]:
    """(title, sentences, is the question's own) for its paragraphs among others' whole paragraphs,
    shuffled (seeded by set and item) until about ``HAYSTACK_CHARS`` characters."""
    rng = random.Random(f"{name}/{doc}")
    own = [(p["title"], p["sentences"], True) for p in items[doc]["paragraphs"]]
    titles = {t for t, _, _ in own}
    pool = [(p["title"], p["sentences"], False) for i, it in enumerate(items) if i != doc
            for p in it["paragraphs"] if p["title"] not in titles]  # fmt: skip
    rng.shuffle(pool)
    chosen, size = list(own), sum(_paragraph_chars(p) for p in own)
    for paragraph in pool:
        if size >= HAYSTACK_CHARS:
            break
        chosen.append(paragraph)
        size += _paragraph_chars(paragraph)
    rng.shuffle(chosen)
    return chosen


def _paragraph_chars(paragraph: tuple[str, list[str], bool]) -> int:
    title, sentences, _ = paragraph
    return len(title) + 3 + sum(len(s.strip()) + 1 for s in sentences)


def _join_paragraphs(paragraphs: Sequence[tuple[str, list[str], bool]]) -> tuple[str, dict]:
    """Title line, then the sentences joined by spaces; blank lines between paragraphs. Also the span
    of each of the question's own sentences, keyed by (title, sentence index)."""
    parts: list[str] = []
    spans: dict[tuple[str, int], tuple[int, int]] = {}
    at = 0
    for title, sentences, own in paragraphs:
        at += len(title) + 1
        pieces = [s.strip() for s in sentences]
        for i, piece in enumerate(pieces):
            if own:
                spans[(title, i)] = (at, at + len(piece))
            at += len(piece) + 1
        parts.append(f"{title}\n{' '.join(pieces)}")
        at += 1  # the blank line's second newline (the first ended the last sentence)
    return "\n\n".join(parts), spans


_BUILDERS = {
    "locomo": functools.partial(_annotated, "locomo", "all"),
    "topic": _topic,
    "hotpot": _hotpot,
    "musique": _musique,
    "qmsum": functools.partial(_annotated, "qmsum", "share"),
    "locomo-messages": _messages,
}


def covered(evidence: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Characters of each evidence span inside the kept spans (kept spans are disjoint)."""
    if not spans:
        return np.zeros(len(evidence))
    starts = np.array([s for s, _ in spans])
    ends = np.array([e for _, e in spans])
    inside = [np.clip(np.minimum(ends, b) - np.maximum(starts, a), 0, None).sum() for a, b in evidence]
    return np.array(inside, dtype=np.float64)


def score(case: Case, spans: Sequence[tuple[int, int]]) -> float:
    """1/0 for ``any`` and ``all`` (a span counts when 90% of it is kept), the kept share for ``share``."""
    inside = covered(case.evidence, spans)
    lengths = np.array([b - a for a, b in case.evidence], dtype=np.float64)
    if case.rule == "share":
        return float(_share(case.evidence, spans))
    kept = inside >= COVERED * lengths
    return float(kept.any() if case.rule == "any" else kept.all())


def _share(evidence: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> float:
    """Kept characters over evidence characters, counting overlapping evidence spans once."""
    merged: list[list[int]] = []
    for a, b in sorted(evidence):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = sum(b - a for a, b in merged)
    return covered([tuple(m) for m in merged], spans).sum() / max(1, total)
