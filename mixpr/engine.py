"""The engine behind ``mixpr.compress``: every keyword the gateway needs.

``mixpr.compress`` is the library's face (a text, a question, a budget or top-k, a route, a kind);
this module's ``compress`` is what it and the gateway call, with the plumbing a caller that builds
its own prompts needs:

- ``boundaries``: character offsets no chunk may cross (the gateway's message boundaries);
- ``query_span``: where the question already is inside ``text`` (the last user message);
- ``original_tokens``: the text's token count when the caller has counted it already;
- ``source`` and ``parts``: for tool outputs (``kind``), the file a text shows, or several outputs
  laid end to end under one budget;
- ``method``: the baselines ("rag-sparse", "middle-out") the benchmarks compare against.

Flow: chunk -> find the question (``query``) -> weigh the words (TF-IDF for the global
expert and RAG-Sparse, BM25 for the local one) -> rank (PageRank; the local route fuses BM25
relevance and then the text's structure, ``structure``) -> select (budget) -> rebuild.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mixpr import (
    baselines,
    bridge,
    experts,
    headings,
    kinds,
    lexical,
    order,
    outputs,
    quoted,
    routing,
    selection,
    structure,
)
from mixpr import query as questions  # ``query`` is also compress()'s keyword
from mixpr.budget import is_count, join_spans
from mixpr.chunking import Chunks, chunk_text
from mixpr.embedding import bm25, counts_and_words, tfidf, unit_rows
from mixpr.tokens import count_tokens

__all__ = ["METHODS", "ROUTES", "Compressed", "assemble", "compress", "join_spans"]

METHODS = ("mixpr", "rag-sparse", "middle-out")
ROUTES = ("auto", "heuristic", "local", "global")
# Calibrating the chars->tokens estimate converges in two or three rounds.
_FIT_ROUNDS = 4


@dataclass(frozen=True)
class Compressed:
    text: str
    spans: list[tuple[int, int]]
    stats: dict = field(default_factory=dict)
    parts: list[str] = field(default_factory=list)  # with ``parts=``: each part's kept text
    tokens: int | None = None  # ``text``'s exact tokens for ``model``, when this call counted them


def compress(
    text: str,
    *,
    budget_tokens: int | None = 4000,
    top_k: int | None = None,
    route: str = "auto",
    ask_llm: Callable[[str], str] | None = None,
    method: str = "mixpr",
    model: str | None = None,
    boundaries: Iterable[int] = (),
    original_tokens: int | None = None,
    query_span: tuple[int, int] | None = None,
    kind: str | None = None,
    query: str = "",
    source: str | None = None,
    parts: Sequence[tuple[int, str]] | None = None,
) -> Compressed:
    """Keep the chunks of ``text`` that matter for its final question.

    ``top_k`` keeps that many chunks; otherwise ``budget_tokens`` bounds the result's
    tokens (counted with ``model``'s tiktoken encoding). ``route`` picks the expert:
    "local" (personalised PageRank, α=0.6), "global" (PageRank, α=0), "heuristic",
    or "auto" (ask ``ask_llm`` the paper's y/n question, heuristic if it can't say).
    ``boundaries`` are offsets no chunk may cross (e.g. message boundaries).
    ``query_span``: where the question is, as (start, end) character offsets in ``text``;
    without it the question is the text's trailing paragraph (after a blank line) if short,
    else its last chunk (see ``mixpr.query``). The query chunks are always kept, even when they alone
    are over ``budget_tokens`` (the gateway sends its question whole); ``mixpr.compress`` then cuts.

    ``kind``: cut ``text`` by its content kind (``mixpr.kinds.KINDS``: "auto" detects it; "code",
    "log", "json", "grep", "diff", "prose") instead of into the paper's sentences, for tool outputs:
    ``query`` is then what the text answers (a tool call, the agent's words, the task), outside
    ``text``, and every cut leaves a marker naming the omitted lines (and ``source``, the file the
    text shows, when the caller knows it and the text does not say). ``None``: today's behaviour.
    A caller that budgets by kind (file views kept more than logs) asks ``mixpr.kinds.resolve``
    first and passes the kind it found.

    ``parts`` (with ``kind``): ``text`` is several outputs laid end to end, each given as (its end
    offset, its title: what produced it, e.g. the tool call). Each is cut by its own kind, the
    title's words count in each of its blocks, all blocks are ranked in one graph against ``query``
    and kept within one ``budget_tokens``: an output the query needs keeps its lines, others give
    up their room. ``Compressed.parts`` holds each part's kept text with its markers ("" for a part
    that keeps nothing); ``text`` is their concatenation.

    With ``kind`` the result is within ``budget_tokens`` for every budget of at least one token: a
    block bigger than the budget is cut inside, with a marker, and a budget smaller than a marker keeps
    the text's first tokens (``mixpr.outputs``).
    """
    if parts is not None:
        return _compress_parts(text, budget_tokens, kind, query, list(parts), model, original_tokens, source)
    if kind is not None or query or source is not None:
        return _compress_kind(text, budget_tokens, kind, query, source, model, original_tokens,
                              (top_k, route, method, tuple(boundaries), query_span))  # fmt: skip
    _validate(budget_tokens, top_k, route, method, query_span, len(text))
    clock = _Clock()
    chunks = clock.run("chunk", chunk_text, text, boundaries=boundaries)
    if original_tokens is None:
        original_tokens = clock.run("count", count_tokens, text, model)
    stats = {"method": method, "original_tokens": original_tokens, "original_chunks": len(chunks)}
    if top_k is None and original_tokens <= budget_tokens:  # it already fits: hand it back untouched
        stats.update(route=None, router=None, alpha=None, kept_tokens=original_tokens)
        stats.update(kept_chunks=len(chunks), timings_ms=clock.timings())
        return Compressed(text, [(0, len(text))] if text else [], stats)
    if len(chunks) == 0:  # whitespace only: nothing to retrieve
        stats.update(route=None, router=None, alpha=None, kept_tokens=0, kept_chunks=0)
        return Compressed("", [], {**stats, "timings_ms": clock.timings()}, tokens=0)
    p = questions.query_weights(chunks, query_span)
    counts, words, titled = clock.run("embed", _counts, chunks, p) if method != "middle-out" else (None,) * 3
    tokens_per_char = original_tokens / max(1, len(text))
    kept_chunks = top_k or int(budget_tokens / max(1e-9, tokens_per_char * len(text) / len(chunks)))
    scores = _score(chunks, (counts, words, titled), p, method, route, ask_llm, clock, stats, kept_chunks)
    keep, kept_text, kept_tokens = clock.run(
        "select", _select, chunks, scores, p, budget_tokens, top_k, model, tokens_per_char
    )
    stats.update(kept_tokens=kept_tokens, kept_chunks=len(keep), timings_ms=clock.timings())
    spans = list(zip(chunks.starts[keep].tolist(), chunks.ends[keep].tolist(), strict=True))
    return Compressed(kept_text, spans, stats, tokens=kept_tokens)


def _compress_kind(text, budget_tokens, kind, query, source, model, original_tokens, others) -> Compressed:
    """``compress`` for typed content: ``mixpr.outputs`` ranks the kind's blocks."""
    _validate_kind(kind, budget_tokens, others)
    clock = _Clock()
    if original_tokens is None:
        original_tokens = clock.run("count", count_tokens, text, model)
    stats = {
        "method": "mixpr",
        "route": "mixture",
        "router": None,
        "alpha": None,
        "original_tokens": original_tokens,
    }
    if original_tokens <= budget_tokens:  # small outputs pass whole
        stats.update(kind=None, kept_tokens=original_tokens, timings_ms=clock.timings())
        return Compressed(text, [(0, len(text))] if text else [], stats)
    if not text.strip():  # whitespace over the budget: nothing to keep
        stats.update(kind=None, kept_tokens=0, timings_ms=clock.timings())
        return Compressed("", [], stats)
    kept, spans, found = clock.run(
        "rank", outputs.compress_blocks, text, kind=kind, query=query, source=source,
        budget_tokens=budget_tokens, model=model, tokens=original_tokens,
    )  # fmt: skip
    stats.update(found, timings_ms=clock.timings())
    return Compressed(kept, spans, stats)


def _compress_parts(text, budget_tokens, kind, query, parts, model, original_tokens, source) -> Compressed:
    """``compress`` for several typed outputs under one budget (``mixpr.outputs.compress_parts``)."""
    _validate_kind(kind, budget_tokens, (None, "auto", "mixpr", (), None))
    ends = [end for end, _ in parts]
    if source is not None or any(not isinstance(title, str) for _, title in parts) or ends != sorted(ends) \
            or not ends or ends[-1] != len(text) or ends[0] < 0:
        raise ValueError("parts must be (end, title) pairs with increasing ends, the last at len(text); "
                         "no source (each part's title names what it shows)")
    clock = _Clock()
    if original_tokens is None:
        original_tokens = clock.run("count", count_tokens, text, model)
    stats = {"method": "mixpr", "route": "mixture", "router": None, "alpha": None,
             "original_tokens": original_tokens}
    kept, spans, found, texts = clock.run(
        "rank", outputs.compress_parts, text, parts=parts, kind=kind, query=query,
        budget_tokens=budget_tokens, model=model, tokens=original_tokens,
    )  # fmt: skip
    stats.update(found, timings_ms=clock.timings())
    return Compressed(kept, spans, stats, texts)


def _validate_kind(kind, budget_tokens, others) -> None:
    if kind is None:
        raise ValueError("query and source describe typed content: give kind too (e.g. kind='auto')")
    if kind not in kinds.KINDS:
        raise ValueError(f"kind must be one of {', '.join(kinds.KINDS)}; got {kind!r}")
    if not is_count(budget_tokens):
        raise ValueError(f"budget_tokens must be a positive integer; got {budget_tokens!r}")
    top_k, route, method, boundaries, query_span = others
    if top_k is not None or route != "auto" or method != "mixpr" or boundaries or query_span is not None:
        raise ValueError(
            "with kind, give the question as query=; top_k, route, method, boundaries "
            "and query_span are for untyped text (kind=None)"
        )


def _counts(chunks: Chunks, p: np.ndarray | None = None):
    """Word counts of the chunks, each also counting its block's heading (``mixpr.headings``), the
    question's without its label (``query.unlabelled``); their words; and the headings with their own
    counts (same columns), which ``bridge`` reads."""
    found = headings.titles(chunks)
    texts = chunks.texts() if p is None else questions.unlabelled(chunks.texts(), p)
    counts, words = counts_and_words(texts + found.texts)
    n = len(chunks)
    return headings.with_headings(counts[:n], counts[n:], found.owner), words, (found, counts[n:])


def _validate(budget_tokens, top_k, route, method, query_span, length) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    if route not in ROUTES:
        raise ValueError(f"route must be one of {', '.join(ROUTES)}; got {route!r}")
    if top_k is not None:
        if not is_count(top_k):
            raise ValueError(f"top_k must be a positive integer; got {top_k!r}")
    elif not is_count(budget_tokens):
        raise ValueError(f"budget_tokens must be a positive integer; got {budget_tokens!r}")
    if query_span is not None and not _is_span(query_span, length):
        raise ValueError(f"query_span must be (start, end), 0 <= start < end <= {length}; got {query_span!r}")


def _is_span(span, length: int) -> bool:
    try:
        start, end = span
    except (TypeError, ValueError):
        return False
    return all(isinstance(v, int) for v in (start, end)) and 0 <= start < end <= length


def _score(chunks: Chunks, counted, p, method, route, ask_llm, clock, stats, kept_chunks) -> np.ndarray:
    """Each scorer weights the counts its own way: TF-IDF for RAG-Sparse and the global expert
    (there frequent words are the signal), BM25 for the local expert (see ``_local``)."""
    counts, words, titled = counted
    if method == "middle-out":
        stats.update(route=None, router=None, alpha=None)
        return clock.run("rank", baselines.middle_out_scores, len(chunks))
    if method == "rag-sparse":
        stats.update(route=None, router=None, alpha=None)
        return clock.run("rank", baselines.rag_sparse_scores, clock.run("embed", tfidf, counts), p)
    chosen, decided_by = clock.run("route", _route, chunks, route, ask_llm, p)
    stats.update(route=chosen, router=decided_by, alpha=routing.ALPHA[chosen])
    if chosen == routing.GLOBAL:
        E = clock.run("embed", tfidf, counts)
        return clock.run("rank", experts.global_scores, E, p, kept_chunks=kept_chunks)
    W = clock.run("embed", bm25, counts)
    return clock.run("rank", _local, chunks, W, words, p, kept_chunks, titled)


def _local(chunks: Chunks, W, words, p, kept_chunks, titled) -> np.ndarray:
    """The local expert on BM25 rows, fused with BM25 relevance to the question, then the
    text's structure. On real documents (bench/real_docs.py) BM25's saturation and partial
    length norm rank a long clause that names a rare query word once above short chunks
    that share frequent words, both for the query and in the graph's similarities. The question's
    words also match their variants ("pointers" meets "point", ``mixpr.lexical``). A second round
    follows the best chunks' rare words to the articles whose titles name them (``mixpr.bridge``)."""
    found, heads = titled
    asked_text = questions.query_text(chunks, p)  # read once: the lexical, quoted and order lists use it
    asked = lexical.query_vector(W, p, words, asked_text)
    relevance = np.asarray(W @ asked).ravel()  # lexical.lexical_scores, with the words kept for the bridge
    scores = experts.local_scores(unit_rows(W), p, kept_chunks=kept_chunks, lexical=relevance)
    scores = bridge.with_bridges(scores, bridge.bridge_scores(W, heads, found.under, scores, p, asked))
    scores = _order(asked_text, scores, relevance, p)
    scores = _quoted(chunks, asked_text, scores, relevance, p)
    return structure.arrange(scores, chunks, np.flatnonzero(p), apart=found.firsts)


def _quoted(chunks: Chunks, asked_text: str, scores, relevance, p) -> np.ndarray:
    """The chunks that quote a term the question (``asked_text``) quotes join the fusion as a list of
    their own (``mixpr.quoted``), ranked by their relevance."""
    rows = quoted.quoting(chunks, quoted.terms(asked_text))
    rows = rows[p[rows] == 0]  # the question quotes its own terms
    if not len(rows):
        return scores
    listed = np.zeros(len(scores))
    listed[rows] = 1.0 + relevance[rows]
    return scores + quoted.WEIGHT * experts.fuse_ranks(listed)


def _order(asked_text: str, scores, relevance, p) -> np.ndarray:
    """A question about order ("the second topic we discussed") also ranks its matches by position."""
    where = order.direction(asked_text)
    if not where:
        return scores
    asked = np.where(p > 0, 0.0, relevance)  # the question matches itself best
    return scores + order.WEIGHT * experts.fuse_ranks(order.position_scores(asked, where))


def _route(chunks: Chunks, route: str, ask_llm, p) -> tuple[str, str]:
    """The LLM reads the paper's first and last two chunks; the keyword heuristic reads only the
    request: the located question and an instruction line at the top. On a real document the
    first chunks are the document's own ("This article's plot summary may be too long"), and a
    cue word there sent a local question to the global route (bench/README.md)."""
    if route in (routing.LOCAL, routing.GLOBAL):
        return route, "forced"
    asked = np.union1d(questions.first_line(chunks), np.flatnonzero(p))
    request = " ".join(chunks.text[chunks.starts[i] : chunks.ends[i]].strip() for i in asked)
    if route == "heuristic":
        return routing.heuristic_route(request), "heuristic"
    return routing.choose_route(_ends(chunks), ask_llm, heuristic_query=request)


def _ends(chunks: Chunks) -> list[str]:
    """Only the first two and last two chunks' texts: the router never needs the rest."""
    n = len(chunks)
    picked = sorted(set(range(min(2, n))) | set(range(max(0, n - 2), n)))
    return [chunks.text[chunks.starts[i] : chunks.ends[i]] for i in picked]


def _select(chunks: Chunks, scores, p, budget_tokens, top_k, model, tokens_per_char):
    pinned = np.flatnonzero(p)
    if top_k is not None:
        keep = selection.top_k(scores, top_k, pinned)
        kept_text = assemble(chunks, keep)
        return keep, kept_text, count_tokens(kept_text, model)
    return _fit_budget(chunks, scores, pinned, budget_tokens, model, tokens_per_char)


def _fit_budget(chunks: Chunks, scores, pinned, budget, model, tokens_per_char):
    """Select by estimated tokens, then recount exactly and recalibrate the estimate."""
    sizes = (chunks.ends - chunks.starts).astype(np.float64)
    for _ in range(_FIT_ROUNDS):
        keep = selection.within_budget(scores, sizes * tokens_per_char, budget, pinned)
        kept_text = assemble(chunks, keep)
        kept_tokens = count_tokens(kept_text, model)
        if 0.97 * budget <= kept_tokens <= budget:
            break
        tokens_per_char *= kept_tokens / max(1.0, sizes[keep].sum() * tokens_per_char)
    while kept_tokens > budget and len(keep) > len(pinned):
        keep = _drop_worst(keep, scores, pinned, sizes * tokens_per_char, kept_tokens - budget)
        kept_text = assemble(chunks, keep)
        kept_tokens = count_tokens(kept_text, model)
    return keep, kept_text, kept_tokens


def _drop_worst(keep, scores, pinned, est_sizes, excess) -> np.ndarray:
    droppable = np.setdiff1d(keep, pinned)
    order = droppable[np.argsort(scores[droppable], kind="stable")]
    count = max(1, int(np.searchsorted(np.cumsum(est_sizes[order]), excess)) + 1)
    return np.setdiff1d(keep, order[:count])


def assemble(chunks: Chunks, keep: np.ndarray) -> str:
    """The kept chunks' original text; a gap becomes a newline if it held one, else a space."""
    return join_spans(chunks.text, zip(chunks.starts[keep].tolist(), chunks.ends[keep].tolist(), strict=True))


class _Clock:
    """Wall time per named stage, in milliseconds."""

    def __init__(self) -> None:
        self._ms: dict[str, float] = {}

    def run(self, stage: str, fn, *args, **kwargs):
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self._ms[stage] = self._ms.get(stage, 0.0) + (time.perf_counter() - started) * 1000

    def timings(self) -> dict[str, float]:
        ms = {stage: round(value, 2) for stage, value in self._ms.items()}
        ms["total"] = round(sum(self._ms.values()), 2)
        return ms
