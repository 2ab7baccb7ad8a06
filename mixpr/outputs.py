"""Tool outputs and other typed content: blocks (``mixpr.kinds``) -> ranked -> kept within budget,
with a marker at every cut (``mixpr.markers``).

Ranking is the paper's mixture of PageRanks over a sparse block graph (rows: BM25 weights of
identifier-aware counts, ``mixpr.identifiers``):

- relevance: each block's BM25 match with the query's rare words (the query is the tool call, what
  the agent said when making it, and the task; it lies outside the text, so it personalises only);
- local: personalised PageRank from the blocks in proportion to their relevance (α = 0.6), which
  follows an identifier from the block that matches the query to the blocks that use it;
- along the text: PageRank on the chain of consecutive blocks, so a match's neighbours (the rest of
  its function, the traceback around an error) come next;
- global: plain PageRank (α = 0), the blocks tied to most others: what the output is about when the
  query matches nothing in it.

The lists are fused by reciprocal rank. Pinned blocks (error lines, header, footer) come first.
All steps are sparse products or chains: linear in the text.
"""

from __future__ import annotations

import numpy as np

from mixpr import experts, identifiers, kinds, markers, pagerank
from mixpr.embedding import bm25, tfidf, unit_rows
from mixpr.tokens import count_tokens

LOCAL_ALPHA = 0.6
CHAIN_ALPHA = 0.3
# A word in more than this share of the blocks ("self", "the", a class's own name) links
# everything and matches everything; it counts neither in the query nor in the local graph.
COMMON_SHARE = 0.2
GLOBAL_WEIGHT = 0.5
FIT_ROUNDS = 5
# A marker costs about this many tokens; a gap that costs no more is kept instead of cut.
MARKER_TOKENS = 16


def compress_blocks(
    text: str,
    *,
    kind: str,
    query: str,
    source: str | None,
    budget_tokens: int,
    model: str | None,
    tokens: int,
) -> tuple[str, list[tuple[int, int]], dict]:
    """The kept text (markers included, within ``budget_tokens`` unless one block alone is larger),
    the kept blocks' spans in ``text``, and stats. ``tokens``: the text's own token count."""
    found = kinds.resolve(text, kind)
    blocks = kinds.split(text, found, source)
    scores = block_scores(blocks, query)
    keep, kept, kept_tokens = _fit(blocks, scores, budget_tokens, model, tokens / max(1, len(text)))
    spans = list(zip(blocks.starts[keep].tolist(), blocks.ends[keep].tolist(), strict=True))
    stats = {
        "kind": found,
        "original_chunks": len(blocks),
        "kept_chunks": len(keep),
        "kept_tokens": kept_tokens,
    }
    return kept, spans, stats


def block_scores(blocks: kinds.Blocks, query: str) -> np.ndarray:
    """The fused rank score of every block; pinned blocks above all others."""
    counts, _, asked = identifiers.counts_and_words(blocks.texts(), query)
    if counts.shape[1] == 0:
        return blocks.pinned.astype(np.float64)
    W = bm25(counts)
    uncommon = experts.rare_words(W, share=COMMON_SHARE, at_least=1)
    relevance = _relevance(W, asked, uncommon)
    central = pagerank.factorised(unit_rows(tfidf(counts)), np.ones(len(blocks)), 0.0)
    ranked = [relevance]
    if relevance.sum() > 0:
        graph = unit_rows(W[:, uncommon].tocsr())
        ranked.append(pagerank.factorised(graph, relevance, LOCAL_ALPHA))
        ranked.append(pagerank.along_chain(relevance, CHAIN_ALPHA))
    scores = experts.fuse_ranks(*ranked) + GLOBAL_WEIGHT * experts.fuse_ranks(central)
    if blocks.prior is not None:
        scores = scores * blocks.prior
    return scores + blocks.pinned * (scores.max() + 1.0)  # each pinned level above all below it


def _relevance(W, asked: np.ndarray, uncommon: np.ndarray) -> np.ndarray:
    """BM25 match of each block with the query's uncommon words; a word the query repeats (the task
    and the call both name it) counts more, but only logarithmically."""
    weights = np.zeros(W.shape[1])
    weights[uncommon] = np.log1p(asked[uncommon])
    return np.asarray(W @ weights).ravel()


def _fit(blocks: kinds.Blocks, scores: np.ndarray, budget: int, model: str | None, per_char: float):
    """Best blocks first within the budget, recounted exactly with their markers; the room is
    corrected each round by the exact count, then the worst blocks go until it fits."""
    sizes = (blocks.ends - blocks.starts).astype(np.float64)
    order = np.argsort(-scores, kind="stable")
    room = float(budget)
    for _ in range(FIT_ROUNDS):
        taken = max(1, int(np.searchsorted(np.cumsum(sizes[order] * per_char), room, side="right")))
        keep = filled(np.sort(order[:taken]), sizes * per_char)
        kept = markers.assemble(blocks, keep)
        tokens = count_tokens(kept, model)
        if 0.97 * budget <= tokens <= budget:
            return keep, kept, tokens
        room *= budget / max(1, tokens)
    while tokens > budget and taken > 1:  # drop about the excess at once: a few recounts, not one per block
        excess = np.cumsum(sizes[order[:taken]][::-1] * per_char)
        taken -= max(1, min(taken - 1, int(np.searchsorted(excess, tokens - budget)) + 1))
        keep = filled(np.sort(order[:taken]), sizes * per_char)
        kept = markers.assemble(blocks, keep)
        tokens = count_tokens(kept, model)
    return keep, kept, tokens


def filled(keep: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """``keep`` plus every gap (run of omitted blocks) whose estimated tokens are no more than its
    marker's: cutting it would save nothing."""
    gaps_before = np.concatenate(([0], np.cumsum(cost)))  # tokens before each block
    inside = [
        np.arange(a + 1, b)
        for a, b in zip(keep[:-1].tolist(), keep[1:].tolist(), strict=True)
        if b > a + 1 and gaps_before[b] - gaps_before[a + 1] <= MARKER_TOKENS
    ]
    return np.union1d(keep, np.concatenate(inside)).astype(np.int64) if inside else keep
