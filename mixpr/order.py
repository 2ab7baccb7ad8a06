"""Questions about order ("What is the second topic we discussed?", "the last time") are about position.

Every introduction of a topic matches such a question's words alike; which one it asks for is
said by its ordinal. So when the question holds an ordinal word, a third list joins the local
expert's fusion (at ``WEIGHT``): the chunks that match the question well (at least ``MATCH_SHARE`` of the best
lexical relevance), ordered by position, from the start for "first", "second", ..., "earliest",
from the end for "last", "latest", "most recent".
"""

from __future__ import annotations

import re

import numpy as np

EARLY, LATE = 1, -1
MATCH_SHARE = 0.5
# Twice a fused list's weight: matches that tie in the other lists are ordered by their own rank
# there, earliest first, which one list of position alone only cancels (topic retrieval: 1× and
# 3× both 1.00 on the dev split).
WEIGHT = 2.0
_EARLY = re.compile(r"\b(first|second|third|fourth|fifth|earliest|1st|2nd|3rd|4th|5th)\b", re.IGNORECASE)
_LATE = re.compile(r"\b(last|latest|final|most recent(ly)?)\b", re.IGNORECASE)


def direction(question: str) -> int:
    """EARLY, LATE, or 0 when the question names no order (both: the earlier word wins)."""
    early, late = _EARLY.search(question), _LATE.search(question)
    if early and (not late or early.start() < late.start()):
        return EARLY
    return LATE if late else 0


def position_scores(relevance: np.ndarray, where: int) -> np.ndarray:
    """Positive scores for the well-matching chunks, highest at the end ``where`` points to."""
    relevance = np.asarray(relevance, dtype=np.float64)
    matched = relevance >= MATCH_SHARE * relevance.max() if len(relevance) and relevance.max() > 0 else []
    scores = np.zeros(len(relevance))
    at = np.flatnonzero(matched)
    scores[at] = (len(relevance) - at) if where == EARLY else (at + 1)
    return scores
