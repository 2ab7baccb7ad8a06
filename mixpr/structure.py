"""The text's own structure in the local ranking: a chunk's sentence and its neighbours.

A chunk is a piece of a sentence or a line, and the evidence a question needs is rarely
exactly one piece: a contract clause is one long sentence cut into several 32-word
chunks, a heading ("11.1 Term.") matches the question while the next sentence answers it,
a paper's answer sits in the sentence after the one that names the method. Two steps, both
linear in the number of chunks:

1. ``spread``: PageRank on the path graph of consecutive chunks, personalised by the
   relevance scores, so a chunk inherits a share of its neighbours' relevance (decaying with
   distance). It is adaptive by construction: a neighbour of a strong match outranks a weak
   match elsewhere, a neighbour of a weak match does not, so a small budget still goes to
   the best matches first.
2. ``whole_sentences``: every piece of a sentence (or line) cut only for length gets the best
   score among its pieces, so a sentence is kept whole or not at all; sentences of more than
   ``MAX_SENTENCE_CHUNKS`` pieces (a list or a dump with no full stops) stay in pieces.

Measured on the real-document dev split (bench/README.md): spread alone lifts contracts and
papers, whole sentences lift contracts (their answers are long clauses).
"""

from __future__ import annotations

import numpy as np

from mixpr import pagerank

SPREAD_ALPHA = 0.3
MAX_SENTENCE_CHUNKS = 8


def arrange(scores: np.ndarray, opens: np.ndarray, pinned: np.ndarray) -> np.ndarray:
    """Scores after both steps; the pinned (query) chunks spread nothing, they are kept anyway."""
    relevance = np.maximum(np.asarray(scores, dtype=np.float64), 0.0)
    relevance[pinned] = 0.0
    return whole_sentences(spread(relevance), opens)


def spread(scores: np.ndarray, *, alpha: float = SPREAD_ALPHA) -> np.ndarray:
    return pagerank.along_chain(scores, alpha)


def whole_sentences(
    scores: np.ndarray, opens: np.ndarray, *, max_chunks: int = MAX_SENTENCE_CHUNKS
) -> np.ndarray:
    """Each chunk gets the best score of its sentence (the run from an opening chunk to the next)."""
    if len(scores) == 0:
        return scores
    first = np.flatnonzero(opens)
    if len(first) == 0 or first[0] != 0:  # the first chunk always opens a sentence
        first = np.concatenate(([0], first[first > 0]))
    sizes = np.diff(np.append(first, len(scores)))
    best = np.maximum.reduceat(scores, first)
    whole = np.repeat(best, sizes)
    small = np.repeat(sizes <= max_chunks, sizes)
    return np.where(small, whole, scores)
