"""A reset's cut: the older messages' long texts, compressed together for the task under one budget.

Every long piece of the older part (tool outputs, the agent's long words, a pasted document over
what fits) is one part of a single MixPR run (``mixpr.engine.compress(..., parts=)``): each cut by its
content kind, all ranked in one graph by personalised PageRank from the query (the task in the
user's words and what the agent is doing now, ``gateway.conversation.task``), the best blocks kept
across the span. So an output the task names keeps its lines, and outputs nobody needs give it their
room; a piece that keeps nothing becomes a one-line placeholder. The result is a pure function of
the pieces, the query and the budget: it is remembered by content hash like any form.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

import mixpr.engine
from gateway.conversation import forms, json_values, task
from mixpr.tokens import count_tokens

PLACEHOLDER_TOKENS = 28  # what a placeholder costs: set aside from the budget for each piece


def key(pieces: list[forms.Piece], query: str, budget: int, salt: str) -> str:
    """The content hash of one reset's cut."""
    digest = hashlib.blake2b(digest_size=20)
    for value in (salt, query, str(budget), *(f"{p.role}\x01{p.title}\x01{p.text}" for p in pieces)):
        digest.update(value.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return "r" + digest.hexdigest()


def recut_job(pieces: list[forms.Piece], query: str, budget: int, model: str | None,
              names: frozenset[str] = frozenset()) -> list[tuple[str, int]]:
    """In a worker: each piece's text after the cut, and its tokens. The outputs of calls that name
    what the user named (``names``: a file, a path, an identifier) are cut first, with the whole
    budget: the others share what they leave, so a look-alike output never keeps text while the
    one the task names becomes a placeholder."""
    split = [_parts(p) for p in pieces]
    # The questions the cut keeps whole are paid from its budget too (they overran it, ~500 each).
    asked = budget - PLACEHOLDER_TOKENS * len(pieces) - sum(count_tokens(s.after, model) for s in split)
    if asked < 1:  # nothing kept but what is never cut: a user message's question
        return [_kept(p, parts, [""] * len(parts.texts), model) if p.question else _placeholder(p, model)
                for p, parts in zip(pieces, split, strict=True)]
    named = {k for k, piece in enumerate(pieces) if names and _names_it(piece, names)}
    first = sorted(named)
    rest = [k for k in range(len(pieces)) if k not in named]
    kept: dict[int, list[str]] = {}
    for group in (first, rest):
        kept |= _ranked([pieces[k] for k in group], [split[k] for k in group], query, asked, model,
                        offset=group)
        asked = max(1, asked - sum(count_tokens(text, model) for k in group for text in kept[k]))
    return [_kept(piece, parts, kept[k], model)
            for k, (piece, parts) in enumerate(zip(pieces, split, strict=True))]


def _ranked(pieces: list[forms.Piece], split: list[_Parts], query: str, asked: int, model: str | None,
            offset: list[int]) -> dict[int, list[str]]:
    """One MixPR run over ``pieces``' parts within ``asked`` tokens: what each part kept, by the
    piece's index in ``offset``."""
    texts = [text for parts in split for text in parts.texts]
    titles = [piece.title for piece, parts in zip(pieces, split, strict=True) for _ in parts.texts]
    ends = list(itertools.accumulate(len(text) for text in texts))
    kept = iter(mixpr.engine.compress("".join(texts), budget_tokens=asked, kind="auto", query=query,
                                      model=model, parts=list(zip(ends, titles, strict=True))).parts
                if texts else [])
    return {k: [next(kept) for _ in parts.texts] for k, parts in zip(offset, split, strict=True)}


def _names_it(piece: forms.Piece, names: frozenset[str]) -> bool:
    """Whether the call that produced ``piece`` names one of ``names`` (as a whole word)."""
    return not names.isdisjoint(task.words(f"{piece.title} {piece.source or ''}"))


@dataclass(frozen=True)
class _Parts:
    """What the cut may shorten in one piece: its text; a user message's body (its question stays
    whole, ``after``); a tool call's long JSON string values (``arguments``: the parsed JSON)."""

    texts: list[str]
    after: str = ""
    arguments: Any = None


def _parts(piece: forms.Piece) -> _Parts:
    if piece.call is not None:
        try:  # nested deeper than the interpreter's stack: kept as written, the cut goes on
            parsed = json.loads(piece.text)
            return _Parts(_long_strings(parsed), arguments=parsed)
        except (ValueError, RecursionError):
            return _Parts([])
    if piece.question:
        body, question = forms.split_question(piece.text)
        # A user message that is all question (one paragraph) is never cut: it is the user's words.
        return _Parts([body], question) if body else _Parts([])
    return _Parts([piece.text])


def _long_strings(value: Any) -> list[str]:
    return json_values.long_strings(value, forms.ARGUMENT_MIN_CHARS)


def _kept(piece: forms.Piece, parts: _Parts, kept: list[str], model: str | None) -> tuple[str, int]:
    """A piece's text from what its parts kept: arguments as JSON again (a value that kept nothing
    says how long it was), a user message with its question, a piece that kept nothing a placeholder."""
    if not parts.texts:  # arguments that are not JSON, a user message that is all question: as they are
        return piece.text, count_tokens(piece.text, model)
    if parts.arguments is not None:
        values = iter(kept)
        shrunk = _replaced(parts.arguments, lambda s: next(values) or _omitted(s))
        text = json.dumps(shrunk, ensure_ascii=False)
    elif not any(k.strip() for k in kept):
        return _placeholder(piece, model) if not parts.after else _with_question(piece, parts, model)
    else:
        text = f"{kept[0].rstrip()}\n\n{parts.after}" if parts.after else kept[0]
    return text, count_tokens(text, model)


def _with_question(piece: forms.Piece, parts: _Parts, model: str | None) -> tuple[str, int]:
    text = f"{forms.placeholder(piece)}\n\n{parts.after}"
    return text, count_tokens(text, model)


def _replaced(value: Any, shrink: Any) -> Any:
    """``value`` with its long strings replaced, in the order ``_long_strings`` lists them."""
    return json_values.long_replaced(value, forms.ARGUMENT_MIN_CHARS, shrink)


def _omitted(value: str) -> str:
    return f"[… {len(value)} characters omitted to fit the context …]"


def _placeholder(piece: forms.Piece, model: str | None) -> tuple[str, int]:
    text = forms.placeholder(piece)
    return text, count_tokens(text, model)
