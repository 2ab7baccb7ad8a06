"""The text's own structure in the local ranking: a chunk's sentence and its neighbours.

A chunk is a piece of a sentence or a line, and the evidence a question needs is rarely
exactly one piece: a contract clause is one long sentence cut into several 32-word
chunks, a heading ("11.1 Term.") matches the question while the next sentence answers it,
a paper's answer sits in the sentence after the one that names the method. Two steps, both
linear in the number of chunks (three, with the third):

1. ``spread``: PageRank on the path graph of consecutive chunks, personalised by the
   relevance scores, so a chunk inherits a share of its neighbours' relevance (decaying with
   distance). It is adaptive by construction: a neighbour of a strong match outranks a weak
   match elsewhere, a neighbour of a weak match does not, so a small budget still goes to
   the best matches first. Nothing flows into or out of a titled block (a paragraph under its
   title, ``headings``): it is another subject, such as the next Wikipedia article in HotpotQA's
   haystacks, where a one-sentence article's relevance leaked into its unrelated neighbours and a
   paragraph whose sentences all match outranked it (dev split: HotpotQA 0.67 -> 0.78, QMSum
   0.41 -> 0.40; bench/README.md).
2. ``whole_sentences``: every piece of a sentence (or line) cut only for length gets the best
   score among its pieces, so a sentence is kept whole or not at all; sentences of more than
   ``MAX_SENTENCE_CHUNKS`` pieces (a list or a dump with no full stops) stay in pieces.

3. ``whole_units``: a chat turn (a line opening with a speaker label), a message or a paragraph
   (a block between blank lines or boundaries) of at most ``MAX_UNIT_CHUNKS`` chunks lifts its
   chunks towards its quadratic mean score, in ``UNIT_ROUNDS`` rounds: a turn or paragraph that
   mostly matches is kept whole, a paragraph with one matching sentence is not.

Measured on the real-document dev split (bench/README.md): spread alone lifts contracts and
papers, whole sentences lift contracts (their answers are long clauses), whole units lift LoCoMo
(an evidence turn is several short sentences) and MuSiQue (evidence is a whole paragraph).
"""

from __future__ import annotations

import numpy as np

from mixpr import headings, pagerank
from mixpr.chunking import TURN, Chunks

SPREAD_ALPHA = 0.3
MAX_SENTENCE_CHUNKS = 8
MAX_UNIT_CHUNKS = 16
# A unit's score is the quadratic mean of its chunks': near the best chunk's when most of the unit
# matches, well below it when one sentence of a long paragraph does (bench/README.md: max 0.588,
# quadratic 0.588 with HotpotQA's single supporting sentences 0.04 higher, mean 0.564).
UNIT_POWER = 2.0
# A second round lets the chunks the first round lifted lift the rest of their unit: a unit most
# of which matches ends up whole (dev split, bench/README.md: one round 0.643, two 0.661).
UNIT_ROUNDS = 2


def arrange(
    scores: np.ndarray, chunks: Chunks, pinned: np.ndarray, apart: np.ndarray | None = None
) -> np.ndarray:
    """Scores after all three steps; the pinned (query) chunks spread nothing, they are kept anyway.

    ``apart``: the titled blocks' first chunks (``headings.headed_blocks``; found here if not given)."""
    relevance = np.maximum(np.asarray(scores, dtype=np.float64), 0.0)
    relevance[pinned] = 0.0
    apart = headings.headed_blocks(chunks)[0] if apart is None else apart
    sentences = whole_sentences(spread(relevance, apart=apart), chunks.opens)
    opens = chunks.levels >= TURN
    for _ in range(UNIT_ROUNDS):
        sentences = np.maximum(sentences, whole_units(sentences, opens))
    return sentences


def spread(scores: np.ndarray, *, alpha: float = SPREAD_ALPHA, apart: np.ndarray | None = None) -> np.ndarray:
    """Neighbours share relevance, except across ``apart`` (chunks that open a titled block)."""
    return pagerank.along_chain(scores, alpha, apart=apart)


def whole_units(scores: np.ndarray, opens: np.ndarray, *, max_chunks: int = MAX_UNIT_CHUNKS) -> np.ndarray:
    """Each chunk of a unit (the run from one opening chunk to the next) gets the unit's quadratic mean
    score; units of more than ``max_chunks`` chunks (a whole unbroken document) keep their scores."""
    if len(scores) == 0:
        return scores
    first, sizes = _runs(opens, len(scores))
    power = np.add.reduceat(np.asarray(scores, dtype=np.float64) ** UNIT_POWER, first) / sizes
    unit = np.repeat(power ** (1 / UNIT_POWER), sizes)
    return np.where(np.repeat(sizes <= max_chunks, sizes), unit, scores)


def _runs(opens: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """First index and length of each run that starts at an opening chunk (chunk 0 always opens)."""
    first = np.flatnonzero(opens)
    if len(first) == 0 or first[0] != 0:
        first = np.concatenate(([0], first[first > 0]))
    return first, np.diff(np.append(first, n))


def whole_sentences(
    scores: np.ndarray, opens: np.ndarray, *, max_chunks: int = MAX_SENTENCE_CHUNKS
) -> np.ndarray:
    """Each chunk gets the best score of its sentence (the run from an opening chunk to the next)."""
    if len(scores) == 0:
        return scores
    first, sizes = _runs(opens, len(scores))
    best = np.maximum.reduceat(scores, first)
    whole = np.repeat(best, sizes)
    small = np.repeat(sizes <= max_chunks, sizes)
    return np.where(small, whole, scores)
