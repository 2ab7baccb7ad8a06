"""Evidence for a follow-up question: passages retrieved for it from what earlier forms cut.

A document pasted once is compressed at first sight for the question asked with it; a later question
needs other passages. Its user message's form therefore starts with an evidence block: MixPR over the
texts of the earlier messages that were cut, the new question as the query, within a cap (a share
of the room). The block is a pure function of the question and the earlier messages, so it is as
stable as any other form. Its size follows the retrieval scores: of what MixPR returns within the
cap, only passages whose match with the question's distinctive words reaches ``KEEP_SHARE`` of the
best match are kept, so a question the earlier text does not answer adds little.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import mixpr.engine
from mixpr.tokens import count_tokens

OPEN = "<earlier_context note=\"passages from earlier in this conversation, not repeated above\">"
CLOSE = "</earlier_context>"
GAP = "\n[…]\n"  # between passages that were not next to each other
SEPARATOR = "\n\n"
KEEP_SHARE = 0.1
# With first-sight forms to leave out, MixPR is asked for this many times the cap: the passages they
# already hold are dropped and the best of the rest fill it.
WIDEN = 1.25
_WORD = re.compile(r"[^\W_]{3,}")


def evidence_job(question: str, texts: list[str], cap: int, model: str | None,
                 present: str = "") -> tuple[str, int]:
    """In a worker: the evidence block for ``question`` from the earlier ``texts`` (whole: a later
    reset may send less of them than their first forms did, and the block must not depend on it),
    within ``cap`` tokens, and its tokens; ("", 0) when nothing matches. Passages that ``present``
    (the texts' first-sight forms, sent before the question) already holds are not repeated: MixPR
    is asked for ``WIDEN`` times the cap, and of the new passages the best matches with the
    question fill the cap, in the document's order."""
    joined = SEPARATOR.join([*texts, question])
    starts = _starts(texts)
    asked = int(cap * (WIDEN if present else 1)) + count_tokens(question, model)
    result = mixpr.engine.compress(joined, budget_tokens=asked, route="local", model=model,
                            boundaries=[*starts, starts[-1] + len(texts[-1])],
                            query_span=(len(joined) - len(question), len(joined)))
    # Sentence by sentence, before touching ones are joined into passages.
    spans = [(lo, hi) for lo, hi in result.spans if joined[lo:hi].strip() not in present] if present \
        else result.spans
    found = _passages(spans, texts, starts, joined)
    passages = _best(found, _scores(found, question), cap, model)
    if not passages:
        return "", 0
    block = f"{OPEN}\n{GAP.join(passages)}\n{CLOSE}"
    return block, count_tokens(block, model)


def _starts(texts: list[str]) -> list[int]:
    starts, at = [], 0
    for text in texts:
        starts.append(at)
        at += len(text) + len(SEPARATOR)
    return starts


def _passages(spans: list[tuple[int, int]], texts: list[str], starts: list[int], joined: str) -> list[str]:
    """The kept spans inside the texts (not the question), as passages: spans with nothing but
    whitespace between them are one passage (MixPR keeps sentences; a clause of two kept sentences is
    one run of the text, and a gap marker inside it would say that something was left out).
    ``joined``: the texts as MixPR was given them (``SEPARATOR`` between them), which ``spans`` index."""
    found = []
    for lo, hi in _runs(spans, texts, starts, joined):
        for text, start in zip(texts, starts, strict=True):
            a, b = max(lo, start), min(hi, start + len(text))
            passage = text[a - start : b - start].strip() if a < b else ""
            if passage:
                found.append(passage)
    return found


def _runs(spans: list[tuple[int, int]], texts: list[str], starts: list[int],
          joined: str) -> list[tuple[int, int]]:
    """``spans`` with the ones that only whitespace separates joined (never across two texts)."""
    ends = [start + len(text) for start, text in zip(starts, texts, strict=True)]
    runs: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if runs and not joined[runs[-1][1]:lo].strip() and not any(runs[-1][1] <= e < lo for e in ends):
            runs[-1] = (runs[-1][0], max(hi, runs[-1][1]))
        else:
            runs.append((lo, hi))
    return runs


def _scores(passages: list[str], question: str) -> list[float]:
    """Each passage's idf-weighted match with the question's distinctive words."""
    asked = {w.lower() for w in _WORD.findall(question)}
    words = [asked & {w.lower() for w in _WORD.findall(p)} for p in passages]
    frequency = Counter(w for found in words for w in found)
    # fsum: exactly rounded, so the same in every process whatever order its hash seed gives the set
    return [math.fsum(math.log(1 + len(passages) / frequency[w]) for w in found) for found in words]


def _best(passages: list[str], scores: list[float], cap: int, model: str | None) -> list[str]:
    """The passages whose match reaches ``KEEP_SHARE`` of the best, best first until ``cap`` tokens
    (ties: the earlier passage), returned in the document's order."""
    best = max(scores, default=0.0)
    if best <= 0:
        return []
    order = sorted((i for i, score in enumerate(scores) if score >= KEEP_SHARE * best),
                   key=lambda i: (-scores[i], i))
    chosen, used = [], 0
    for i in order:
        tokens = count_tokens(passages[i], model)
        if used + tokens <= cap:
            chosen.append(i)
            used += tokens
    return [passages[i] for i in sorted(chosen)]
