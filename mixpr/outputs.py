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

from dataclasses import replace

import numpy as np
import scipy.sparse as sp

from mixpr import budget as budget_
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
# A part's title (the tool call that produced it) counts in each of its blocks at this weight: a task
# that names a file finds every block of the output that shows it, and the block's own words decide.
TITLE_WEIGHT = 0.5


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
    """The kept text (markers included, within ``budget_tokens``), the kept blocks' spans in ``text``,
    and stats. ``tokens``: the text's own token count. One block bigger than the budget is cut inside
    (``_cut_inside``)."""
    found = kinds.resolve(text, kind)
    blocks = kinds.split(text, found, source)
    scores = block_scores(blocks, query)
    keep, kept, kept_tokens = _fit(blocks, scores, budget_tokens, model, tokens / max(1, len(text)))
    spans = list(zip(blocks.starts[keep].tolist(), blocks.ends[keep].tolist(), strict=True))
    if kept_tokens > budget_tokens:
        kept, spans, kept_tokens = _cut_inside(blocks, keep, scores, budget_tokens, model)
    stats = {
        "kind": found,
        "original_chunks": len(blocks),
        "kept_chunks": len(spans),
        "kept_tokens": kept_tokens,
    }
    return kept, spans, stats


def block_scores(
    blocks: kinds.Blocks, query: str, titles: tuple[list[str], np.ndarray] | None = None,
    apart: np.ndarray | None = None,
) -> np.ndarray:
    """The fused rank score of every block; pinned blocks above all others. ``titles``: texts, and
    per block the index of its own (what produced the output it belongs to), whose words count in
    the block at ``TITLE_WEIGHT``. ``apart``: blocks that open an output of their own (relevance does
    not spread to them from the previous one's end)."""
    counts, _, asked = _counts(blocks.texts(), query, titles)
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
        ranked.append(pagerank.along_chain(relevance, CHAIN_ALPHA, apart=apart))
    scores = experts.fuse_ranks(*ranked) + GLOBAL_WEIGHT * experts.fuse_ranks(central)
    if blocks.prior is not None:
        scores = scores * blocks.prior
    return scores + blocks.pinned * (scores.max() + 1.0)  # each pinned level above all below it


def _counts(texts: list[str], query: str, titles: tuple[list[str], np.ndarray] | None):
    if titles is None:
        return identifiers.counts_and_words(texts, query)
    names, owner = titles
    counts, words, asked = identifiers.counts_and_words([*texts, *names], query)
    n = len(texts)
    pick = sp.csr_matrix((np.full(n, TITLE_WEIGHT), (np.arange(n), owner)), shape=(n, len(names)))
    return (counts[:n] + pick @ counts[n:]).tocsr(), words, asked


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


def _cut_inside(blocks: kinds.Blocks, keep: np.ndarray, scores: np.ndarray, budget: int,
                model: str | None) -> tuple[str, list[tuple[int, int]], int]:  # fmt: skip
    """When the best block alone is over the budget (a long line's piece is cut at ``LONG_LINE``
    characters, a thousand tokens of CJK): its head within what its markers leave, at a line's end
    when one is in the head's second half, and a marker for the rest. A budget too small for a marker
    beside any of it keeps the text's first tokens, with no marker. The kept text, span and tokens."""
    best = int(keep[np.argmax(scores[keep])]) if len(keep) else 0
    start, end = int(blocks.starts[best]), int(blocks.ends[best])
    room = budget
    for _ in range(FIT_ROUNDS):
        head = budget_.head_within(blocks.text[start:end], room, model)
        line_end = head.rfind("\n", 0, len(head) - 1)
        if line_end >= len(head) // 2:
            head = head[: line_end + 1]
        if not head:
            break
        kept = markers.assemble(_split_block(blocks, best, start + len(head)), np.array([best]))
        tokens = count_tokens(kept, model)
        if tokens <= budget:
            return kept, [(start, start + len(head))], tokens
        room -= tokens - budget
    head = budget_.head_within(blocks.text, budget, model)
    return head, [(0, len(head))] if head else [], count_tokens(head, model)


def _split_block(blocks: kinds.Blocks, i: int, at: int) -> kinds.Blocks:
    """``blocks`` with block ``i`` cut in two at offset ``at``: its head keeps its first line number, the
    rest starts on the line ``at`` falls in (``markers`` then name "part of output line N")."""
    text, start, last = blocks.text, int(blocks.starts[i]), int(blocks.last_line[i])

    def twice(values):  # block i's entry, twice: the head's and the rest's
        return None if values is None else np.insert(values, i, values[i])

    starts, ends, first_line, last_line = (twice(v) for v in
                                           (blocks.starts, blocks.ends, blocks.first_line, blocks.last_line))
    starts[i + 1] = ends[i] = at
    first_line[i + 1] = min(last, first_line[i] + text.count("\n", start, at))
    last_line[i] = min(last, first_line[i] + text.count("\n", start, max(start, at - 1)))
    labels = [*blocks.labels[: i + 1], *blocks.labels[i:]] if blocks.labels else blocks.labels
    return replace(blocks, starts=starts, ends=ends, first_line=first_line, last_line=last_line,
                   pinned=twice(blocks.pinned), labels=labels, prior=twice(blocks.prior),
                   first_row=twice(blocks.first_row))  # fmt: skip


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


# -- several outputs under one budget ------------------------------------------------------------


def compress_parts(
    text: str,
    *,
    parts: list[tuple[int, str]],
    kind: str,
    query: str,
    budget_tokens: int,
    model: str | None,
    tokens: int,
) -> tuple[str, list[tuple[int, int]], dict, list[str]]:
    """Several outputs laid end to end (``parts``: each one's end offset and title), ranked in one
    graph and kept within one budget: the kept text (the parts' kept texts, one after the other),
    the kept blocks' spans in ``text``, stats, and each part's kept text with its markers ("" when it
    keeps nothing). Pins give no precedence across parts: the header of an output nobody needs is
    not worth its room."""
    ends = [end for end, _ in parts]
    split = [_split(text[a:b], kind) for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    owner = np.concatenate([np.full(len(b), i, dtype=np.int64) for i, b in enumerate(split)])
    joined = _joined(text, split, [0, *ends[:-1]])
    titles = ([title for _, title in parts], owner)
    apart = np.cumsum([len(b) for b in split])[:-1]  # each part's first block: no spread across
    scores = block_scores(joined, query, titles, apart) if len(joined) else owner * 0.0
    per_char = tokens / max(1, len(text))
    keep, texts, kept_tokens = _fit_parts(split, joined, owner, scores, budget_tokens, model, per_char)
    spans = list(zip(joined.starts[keep].tolist(), joined.ends[keep].tolist(), strict=True))
    stats = {"kind": "parts", "original_chunks": len(joined), "kept_chunks": len(keep),
             "kept_tokens": kept_tokens}
    return "".join(texts), spans, stats, texts


def _split(text: str, kind: str) -> kinds.Blocks:
    return kinds.split(text, kinds.resolve(text, kind) if text.strip() else "prose")


def _joined(text: str, split: list[kinds.Blocks], starts: list[int]) -> kinds.Blocks:
    """The parts' blocks as blocks of the whole text (for ranking: no pins, no markers)."""
    def cat(values: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(values) if values else np.zeros(0, dtype=np.int64)

    lo = cat([b.starts + at for b, at in zip(split, starts, strict=True)])
    hi = cat([b.ends + at for b, at in zip(split, starts, strict=True)])
    zeros = np.zeros(len(lo), dtype=np.int8)
    priors = [b.prior if b.prior is not None else np.ones(len(b)) for b in split]
    prior = np.concatenate(priors) if priors else None
    return kinds.Blocks(text, lo, hi, zeros.astype(np.int64), zeros.astype(np.int64), zeros, prior=prior)


def _fit_parts(split: list[kinds.Blocks], joined: kinds.Blocks, owner: np.ndarray, scores: np.ndarray,
               budget: int, model: str | None, per_char: float) -> tuple[np.ndarray, list[str], int]:
    """Best blocks first across all parts within the budget, recounted exactly with their markers."""
    sizes = (joined.ends - joined.starts).astype(np.float64) * per_char
    order = np.argsort(-scores, kind="stable")
    cumulative = np.cumsum(sizes[order])
    room, taken = float(budget), 0
    for _ in range(FIT_ROUNDS):
        taken = int(np.searchsorted(cumulative, room, side="right"))
        keep, texts = _assembled(split, owner, np.sort(order[:taken]), sizes)
        tokens = count_tokens("".join(texts), model)
        if 0.97 * budget <= tokens <= budget or (taken == 0 and tokens <= budget):
            return keep, texts, tokens
        room *= budget / max(1, tokens)
    while tokens > budget and taken > 0:
        excess = np.cumsum(sizes[order[:taken]][::-1])
        taken -= max(1, min(taken, int(np.searchsorted(excess, tokens - budget)) + 1))
        keep, texts = _assembled(split, owner, np.sort(order[:taken]), sizes)
        tokens = count_tokens("".join(texts), model)
    return keep, texts, tokens


def _assembled(split: list[kinds.Blocks], owner: np.ndarray, keep: np.ndarray,
               sizes: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Each part's kept blocks (gaps no dearer than a marker filled in) with markers; "" for a part
    that keeps none. Returns the kept blocks' global indices too. ``keep`` is sorted and parts own
    consecutive blocks, so each part's share is one slice (linear, not parts x kept)."""
    first = np.concatenate(([0], np.cumsum([len(b) for b in split])))
    bounds = np.searchsorted(owner[keep], np.arange(len(split) + 1))
    kept, texts = [], []
    for i, blocks in enumerate(split):
        mine = keep[bounds[i] : bounds[i + 1]] - first[i]
        if len(mine) == 0:
            texts.append("")
            continue
        mine = filled(mine, sizes[first[i] : first[i + 1]])
        kept.append(mine + first[i])
        texts.append(markers.assemble(blocks, mine))
    return (np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)), texts
