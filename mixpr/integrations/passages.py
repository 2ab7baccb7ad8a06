"""What both integrations do: keep the best chunks of several retrieved texts for one query.

The texts are laid end to end with blank lines between them and the query after them (no chunk
crosses from one to the next, ``boundaries``), ranked in one MixPR graph and kept within one token
budget; each text's kept chunks come back in their order, as spans of that text.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from mixpr import budget, engine
from mixpr.tokens import count_tokens

_GAP = "\n\n"


@dataclass(frozen=True)
class Kept:
    """One text's share: its kept (start, end) spans, their text, and its tokens before and after."""

    spans: list[tuple[int, int]]
    text: str
    original_tokens: int
    kept_tokens: int

    def metadata(self) -> dict:
        """What the integrations attach to each kept document: what was cut from it."""
        return {"kept_spans": [list(span) for span in self.spans], "original_tokens": self.original_tokens,
                "kept_tokens": self.kept_tokens, "cut": self.kept_tokens < self.original_tokens}  # fmt: skip


def keep_best(texts: Sequence[str], query: str, *, budget_tokens: int, route: str = "heuristic",
              model: str | None = None) -> list[Kept]:  # fmt: skip
    """Each text's kept part (``spans`` empty: nothing of it kept), within ``budget_tokens`` in all.

    The engine's budget covers the query too, and what comes back is checked on the texts' own
    counts (``budget.shrink``). When no choice of chunks fits (the query pins the last text's last
    chunk, bigger than the budget), the kept parts are cut to the budget in order (``_cut``)."""
    question = query.strip() if isinstance(query, str) else ""
    if not question:
        raise ValueError("MixPR needs the query to rank the documents' chunks; got an empty one")
    if not budget.is_count(budget_tokens):
        raise ValueError(f"budget_tokens must be a positive integer; got {budget_tokens!r}")
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be a str or None; got {type(model).__name__}")
    tokens = [count_tokens(text, model) for text in texts]
    if sum(tokens) <= budget_tokens:
        return [Kept([(0, len(t))] if t else [], t, n, n) for t, n in zip(texts, tokens, strict=True)]
    starts, at = [], 0
    for text in texts:
        starts.append(at)
        at += len(text) + len(_GAP)
    body = _GAP.join(texts)
    joined = f"{body}{_GAP}{question}"
    asked_tokens = count_tokens(_GAP + question, model)

    def run(asked: int | None, top_k: int | None = None) -> list[Kept]:
        found = engine.compress(joined, budget_tokens=asked, top_k=top_k, route=route, model=model,
                                boundaries=[*starts[1:], len(body) + len(_GAP)],
                                original_tokens=sum(tokens) + asked_tokens,
                                query_span=(len(body) + len(_GAP), len(joined)))  # fmt: skip
        return _split(found.spans, texts, starts, tokens, model)

    kept = budget.shrink(run, _kept_tokens, budget_tokens, budget_tokens + asked_tokens)
    if not _kept_tokens(kept) and any(text.strip() for text in texts):
        kept = run(None, 1)  # no chunk fits whole: the best one, whose first tokens ``_cut`` keeps
    return kept if _kept_tokens(kept) <= budget_tokens else _cut(kept, texts, budget_tokens, model)


def _kept_tokens(kept: list[Kept]) -> int:
    return sum(k.kept_tokens for k in kept)


def _cut(kept: list[Kept], texts: Sequence[str], budget_tokens: int, model: str | None) -> list[Kept]:
    """The kept parts, in order, each cut to what the ones before it leave of the budget."""
    room, out = budget_tokens, []
    for part, text in zip(kept, texts, strict=True):
        part_text, spans = budget.spans_within(text, part.spans, room, model) if part.spans else ("", [])
        part_tokens = count_tokens(part_text, model) if spans else 0
        out.append(Kept(spans, part_text, part.original_tokens, part_tokens))
        room -= part_tokens
    return out


def _split(spans, texts, starts, tokens, model) -> list[Kept]:
    """The joined text's kept spans, as each text's own."""
    own: list[list[tuple[int, int]]] = [[] for _ in texts]
    for start, end in spans:
        i = bisect_right(starts, start) - 1
        stop = min(end, starts[i] + len(texts[i]))
        if start < stop:  # not the query's, nor a gap's
            own[i].append((start - starts[i], stop - starts[i]))
    kept = []
    for text, found, n in zip(texts, own, tokens, strict=True):
        part = budget.join_spans(text, found)
        kept.append(Kept(found, part, n, count_tokens(part, model) if found else 0))
    return kept
