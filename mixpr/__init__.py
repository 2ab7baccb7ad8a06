"""MixPR: keep the parts of a long text that answer a question, on the CPU, with no model.

One call::

    import mixpr
    result = mixpr.compress(document, query="What is the vault code?", budget_tokens=300)
    result.text    # the document's kept chunks, in their original order
    result.spans   # their (start, end) character spans in ``document``
    result.stats   # tokens and chunks before and after, the route, timings

That is the library's face: a text, a question, a budget (or ``top_k`` chunks), a route and, for
tool outputs, a kind. The gateway's plumbing (message boundaries, a question already inside the
text, counted tokens, several outputs under one budget, the baselines) is ``mixpr.engine.compress``.
"""

from __future__ import annotations

from collections.abc import Callable

from mixpr import budget, engine
from mixpr.engine import ROUTES, Compressed
from mixpr.kinds import KINDS
from mixpr.tokens import count_tokens

__all__ = ["KINDS", "ROUTES", "Compressed", "compress", "count_tokens", "engine"]

# Between the text and a question given apart: a blank line, so the question is its own paragraph.
_GAP = "\n\n"


def compress(
    text: str,
    *,
    query: str | None = None,
    budget_tokens: int | None = 4000,
    top_k: int | None = None,
    route: str = "auto",
    kind: str | None = None,
    model: str | None = None,
    ask_llm: Callable[[str], str] | None = None,
) -> Compressed:
    """Keep the chunks of ``text`` that matter for ``query``, in their original order.

    ``query``: the question the kept text must answer. It is not part of ``text`` and not in the
    result: ``result.text`` and ``result.spans`` are ``text``'s alone. Without it the question is
    ``text``'s own trailing paragraph (after a blank line), or its last sentence; that question is
    then kept in the result.

    ``budget_tokens`` (any integer from 1) bounds ``result.text``'s tokens, counted with ``model``'s
    tiktoken encoding (``cl100k_base`` for a model tiktoken does not know); ``top_k`` keeps that many
    chunks instead. A text that already fits comes back whole; whitespace over the budget comes back
    as "". When no choice of chunks fits (one dense chunk, or the text's own question, is over the
    budget), the result is the kept text's first ``budget_tokens`` tokens: its spans end where it
    ends, and ``stats["cut_to_budget"]`` is True.

    ``route`` picks MixPR's expert: "local" (a question about one fact: personalised PageRank
    around the question), "global" (a summary of the whole text: PageRank), "heuristic" (decide
    from the question's words) or "auto" (ask ``ask_llm``, a function from prompt to reply, the
    paper's yes/no question; the heuristic when there is no ``ask_llm`` or it cannot say).

    ``kind``: for a tool output rather than a document: "auto" (detect it) or one of "code",
    "log", "json", "grep", "diff", "prose". The text is cut along its own structure (functions,
    log lines, JSON values, hunks) and every cut leaves a marker naming what was left out;
    ``query`` is then what the output is for (the tool call, the task). ``top_k`` and ``route``
    are for documents only.

    Raises ``ValueError`` with a one-line reason for a bad argument.
    """
    _check(text, query, budget_tokens, top_k, route, kind, model)
    question = (query or "").strip()
    if kind is not None:  # within the budget (``mixpr.outputs``)
        return engine.compress(text, budget_tokens=budget_tokens, kind=kind, query=question, model=model)
    found = _chosen(text, question, budget_tokens, top_k, route, ask_llm, model)
    if top_k is None and not found.text.strip() and text.strip():
        # Nothing fits whole (every chunk, or the question's, is over a small budget): the best
        # chunk, whose first tokens ``_within`` keeps, not "".
        found = _chosen(text, question, None, 1, route, ask_llm, model)
    return found if top_k is not None else _within(text, found, budget_tokens, model)


def _chosen(text, question, budget_tokens, top_k, route, ask_llm, model) -> Compressed:
    if question:
        return _with_question(text, question, budget_tokens, top_k, route, ask_llm, model)
    return engine.compress(text, budget_tokens=budget_tokens, top_k=top_k, route=route, ask_llm=ask_llm,
                           model=model)  # fmt: skip


def _check(text, query, budget_tokens, top_k, route, kind, model) -> None:
    if not isinstance(text, str):
        raise ValueError(f"text must be a str; got {type(text).__name__}")
    if query is not None and not isinstance(query, str):
        raise ValueError(f"query must be a str or None; got {type(query).__name__}")
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be a str or None; got {type(model).__name__}")
    if top_k is not None and not budget.is_count(top_k):  # True is an int to Python, never a count
        raise ValueError(f"top_k must be a positive integer (or None); got {top_k!r}")
    if kind is not None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)} (or None for a document); got {kind!r}")
        if top_k is not None or route != "auto":
            raise ValueError("top_k and route are for documents (kind=None); "
                             "a tool output is cut to budget_tokens")
    if (top_k is None or budget_tokens is not None) and not budget.is_count(budget_tokens):
        raise ValueError(f"budget_tokens must be a positive integer (or give top_k); got {budget_tokens!r}")


def _with_question(text, question, budget_tokens, top_k, route, ask_llm, model) -> Compressed:
    """The engine on ``text``, a blank line and ``question`` (``query_span``: always kept, never
    merged with the text's last sentence); the result drops the question again. The engine's budget
    covers the question; what comes back is checked on the text alone (``budget.shrink``)."""
    tokens = count_tokens(text, model)
    if top_k is None and tokens <= budget_tokens or not text.strip():
        stats = {"method": "mixpr", "route": None, "router": None, "alpha": None, "original_tokens": tokens,
                 "kept_tokens": tokens, "kept_chunks": None, "timings_ms": {}}  # fmt: skip
        return Compressed(text, [(0, len(text))] if text else [], stats, tokens=tokens)
    joined = f"{text}{_GAP}{question}"
    asked_tokens = count_tokens(_GAP + question, model)

    def run(asked: int | None) -> Compressed:
        found = engine.compress(
            joined, budget_tokens=asked, top_k=top_k, route=route, ask_llm=ask_llm, model=model,
            boundaries=(len(text),), original_tokens=tokens + asked_tokens,
            query_span=(len(text) + len(_GAP), len(joined)),
        )  # fmt: skip
        spans = [(start, min(end, len(text))) for start, end in found.spans if start < len(text)]
        kept = budget.join_spans(text, spans)
        chunks = found.stats["original_chunks"] - (len(found.spans) - len(spans))  # the question's are not
        kept_tokens = count_tokens(kept, model)
        stats = {**found.stats, "original_tokens": tokens, "kept_tokens": kept_tokens,
                 "kept_chunks": len(spans), "original_chunks": chunks}  # fmt: skip
        return Compressed(kept, spans, stats, tokens=kept_tokens)

    if top_k is not None:
        return run(None)
    return budget.shrink(run, _kept_tokens, budget_tokens, budget_tokens + asked_tokens)


def _kept_tokens(found: Compressed) -> int:
    return found.stats["kept_tokens"]


def _within(text: str, found: Compressed, budget_tokens: int, model: str | None) -> Compressed:
    """``found`` when it fits; else its first ``budget_tokens`` tokens (whitespace: nothing)."""
    if found.stats["kept_tokens"] <= budget_tokens:
        return found
    if not found.text.strip():
        kept, spans = "", []
    else:
        kept, spans = budget.spans_within(text, found.spans, budget_tokens, model)
    kept_tokens = count_tokens(kept, model)
    stats = {**found.stats, "kept_tokens": kept_tokens, "kept_chunks": len(spans),
             "cut_to_budget": True}  # fmt: skip
    return Compressed(kept, spans, stats, tokens=kept_tokens)
