"""The mixture's two experts: chunk scores for local and for global questions.

Local (α = 0.6): personalised PageRank from the query. On a whole book the
walk must not leak through words that tie everything together ("the", "said",
a main character's name): thousands of weak links outweigh the one strong link
a multi-hop question needs. The paper cuts similarities below 0.27 from an
explicit graph, which is quadratic. We get the same effect in two linear steps:

1. candidates: the best chunks by factorised PPR with the frequent words'
   columns removed (a word in more than ``FREQUENT_SHARE`` of the chunks says
   little about which chunk to follow), which finds the multi-hop
   neighbourhood, plus the chunks most similar to the query over all words
   (a query word can be frequent, e.g. the object every bAbI fact moves);
2. PPR on the explicit graph of the candidates, pruned as in the paper
   (``pagerank.PRUNE_BELOW``), which orders that neighbourhood as the paper's
   graph would. Chunks it cannot reach follow by their better step-1 score.

Real documents (``bench/real_docs.py``): the walk's first step from the query ranks chunks
by similarity to the question, and TF-IDF's L2 norm pushes down a long clause that names a
rare query word once below short chunks sharing frequent words. So the local expert walks
on BM25 rows (saturated term counts, partial length norm; see ``compress``), and its final
order fuses the graph's order with the chunks' BM25 relevance to the question's words by
reciprocal rank: a chunk both lists rank well comes first, then the best of either list. The
graph keeps multi-hop chains (bAbI, Hash-Hop); BM25 keeps the sentence that matches.

Global (α = 0): plain PageRank on the full graph, i.e. structural importance.
Here the frequent words are the signal, so nothing is removed. PageRank alone
spends a small budget on one dense cluster (near-duplicate chunks all point at
each other; in RULER's cwe, the one-shot example's word list), so the best
candidates are taken greedily with a redundancy penalty (maximal marginal
relevance): importance minus ``REDUNDANCY`` × the highest similarity to a chunk
already taken. Measured on cwe at 1M tokens: top-word overlap 0.65 -> 0.85.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mixpr import baselines, pagerank
from mixpr.embedding import document_frequency
from mixpr.routing import ALPHA, LOCAL

LOCAL_ALPHA = ALPHA[LOCAL]
FREQUENT_SHARE = 0.01
FREQUENT_MIN_CHUNKS = 20  # short texts: a word in 20 chunks can still be specific
MIN_CANDIDATES = 1000
CANDIDATES_PER_KEPT_CHUNK = 4
# Stop words in all but name: a word in over 10% of the candidates adds < 0.01 to any
# similarity yet makes the explicit product quadratic, so the pruned graph skips it.
STOP_WORD_SHARE = 0.1
REDUNDANCY = 0.5  # tried 0.3, 0.5, 1.0, 2.0 on cwe at 1M: 0.80, 0.85, 0.75, 0.75
# Each greedy step is a sparse mat-vec over the candidates; past this many picks (a
# budget of thousands of one-line chunks) the rest follow in PageRank order.
MAX_DIVERSE_PICKS = 256
# Reciprocal-rank fusion's constant (Cormack et al., 2009): rank r counts 1 / (FUSION_K + r).
FUSION_K = 60


def global_scores(E: sp.csr_matrix, p: np.ndarray, *, kept_chunks: int = 0) -> np.ndarray:
    """PageRank importance; the best candidates re-ordered to avoid redundancy (scores above 1)."""
    importance = pagerank.factorised(E, p, 0.0)
    scores = importance / (importance.max() or 1.0)
    picked = _best(scores, max(MIN_CANDIDATES, CANDIDATES_PER_KEPT_CHUNK * kept_chunks))
    steps = min(MAX_DIVERSE_PICKS, 2 * max(1, kept_chunks))
    order = _diverse_order(E[picked], scores[picked], steps=steps)
    scores[picked[order]] = 2.0 - np.arange(len(order)) / len(order)
    return scores


def _diverse_order(E: sp.csr_matrix, scores: np.ndarray, *, steps: int) -> np.ndarray:
    """Greedy maximal marginal relevance: each step takes the best score minus redundancy."""
    closest = np.zeros(len(scores))
    gain = scores.astype(np.float64).copy()
    order = []
    for _ in range(min(steps, len(scores))):
        best = int(np.argmax(gain - REDUNDANCY * closest))
        order.append(best)
        gain[best] = -np.inf
        closest = np.maximum(closest, (E @ E[best].T).toarray().ravel())
    return np.array(order, dtype=np.int64)


def local_scores(
    E: sp.csr_matrix, p: np.ndarray, *, kept_chunks: int = 0, lexical: np.ndarray | None = None
) -> np.ndarray:
    """``kept_chunks``: about how many chunks the caller will keep; sizes the candidate set.

    ``lexical``: the chunks' BM25 relevance to the query (``lexical.lexical_scores``), fused by rank."""
    scores = _graph_scores(E, p, kept_chunks)
    return scores if lexical is None else fuse_ranks(scores, lexical)


def fuse_ranks(*scores: np.ndarray) -> np.ndarray:
    """Reciprocal-rank fusion: sum over the lists of 1 / (FUSION_K + rank), rank 0 the best.

    Only positive scores are ranked: a chunk a list scores 0 (no query word) gets nothing from
    it, rather than a rank that only says where it sits in the text."""
    fused = np.zeros(len(scores[0]))
    for s in scores:
        order = np.argsort(-s, kind="stable")
        order = order[s[order] > 0]
        fused[order] += 1.0 / (FUSION_K + np.arange(len(order)))
    return fused


def _graph_scores(E: sp.csr_matrix, p: np.ndarray, kept_chunks: int) -> np.ndarray:
    coarse = pagerank.factorised(without_frequent_words(E), p, LOCAL_ALPHA)
    similar = baselines.rag_sparse_scores(E, p)
    count = max(MIN_CANDIDATES, CANDIDATES_PER_KEPT_CHUNK * kept_chunks)
    picked = np.union1d(_best(coarse, count), _best(similar, count))
    picked = np.union1d(picked, np.flatnonzero(p))
    fine = pagerank.pruned(without_frequent_words(E[picked], share=STOP_WORD_SHARE), p[picked], LOCAL_ALPHA)
    # Chunks the pruned graph reaches come first, in its order (scores above 1); all
    # others follow by the better of their two step-1 scores (in [0, 1]), so a fact
    # that shares a single word with a short query still ranks high.
    scores = np.maximum(coarse / (coarse.max() or 1.0), similar / (similar.max() or 1.0))
    reached = fine > 0
    scores[picked[reached]] = 1.0 + fine[reached] / fine.max()
    return scores


def without_frequent_words(
    E: sp.csr_matrix, *, share: float = FREQUENT_SHARE, at_least: int = FREQUENT_MIN_CHUNKS
) -> sp.csr_matrix:
    """E without the columns of words found in more than ``share`` of the rows (rows keep their norm)."""
    return E[:, rare_words(E, share=share, at_least=at_least)].tocsr()


def rare_words(
    E: sp.csr_matrix, *, share: float = FREQUENT_SHARE, at_least: int = FREQUENT_MIN_CHUNKS
) -> np.ndarray:
    """The columns of words found in at most ``share`` of the rows (or ``at_least`` rows), sorted."""
    limit = max(at_least, share * E.shape[0])
    return np.flatnonzero(document_frequency(E) <= limit)


def _best(scores: np.ndarray, k: int) -> np.ndarray:
    if k >= len(scores):
        return np.arange(len(scores))
    return np.argpartition(-scores, k)[:k]
