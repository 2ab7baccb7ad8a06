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
_WORD = re.compile(r"[^\W_]{3,}")


def evidence_job(question: str, texts: list[str], cap: int, model: str | None) -> tuple[str, int]:
    """In a worker: the evidence block for ``question`` from the earlier ``texts`` (whole: a later
    reset may send less of them than their first forms did, and the block must not depend on it),
    within ``cap`` tokens, and its tokens; ("", 0) when nothing matches."""
    joined = SEPARATOR.join([*texts, question])
    starts = _starts(texts)
    asked = cap + count_tokens(question, model)
    result = mixpr.engine.compress(joined, budget_tokens=asked, route="local", model=model,
                            boundaries=[*starts, starts[-1] + len(texts[-1])],
                            query_span=(len(joined) - len(question), len(joined)))
    passages = _relevant(_passages(result.spans, texts, starts), question)
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


def _passages(spans: list[tuple[int, int]], texts: list[str], starts: list[int]) -> list[str]:
    """The kept spans inside the texts (not the question), as passages."""
    found = []
    for lo, hi in spans:
        for text, start in zip(texts, starts, strict=True):
            a, b = max(lo, start), min(hi, start + len(text))
            passage = text[a - start : b - start].strip() if a < b else ""
            if passage:
                found.append(passage)
    return found


def _relevant(passages: list[str], question: str) -> list[str]:
    """Passages whose idf-weighted match with the question's words reaches ``KEEP_SHARE`` of the best."""
    asked = {w.lower() for w in _WORD.findall(question)}
    words = [asked & {w.lower() for w in _WORD.findall(p)} for p in passages]
    frequency = Counter(w for found in words for w in found)
    # fsum: exactly rounded, so the same in every process whatever order its hash seed gives the set
    scores = [math.fsum(math.log(1 + len(passages) / frequency[w]) for w in found) for found in words]
    best = max(scores, default=0.0)
    if best <= 0:
        return []
    return [p for p, score in zip(passages, scores, strict=True) if score >= KEEP_SHARE * best]
