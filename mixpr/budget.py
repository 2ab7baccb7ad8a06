"""Results within a token budget: the one loop that asks for less until a result fits, and the cut that
makes a result fit when nothing smaller can be chosen.

Every budget of at least one token is valid. A caller that hands a question to the engine beside the
text (``mixpr.compress`` with ``query``, the integrations) asks for the budget plus the question's
tokens, then checks what came back: tokens merge across seams, and the engine keeps the question's
chunks (and, for a query of under three words, the chunk before it: the paper's answer-prefix rule)
whatever it is asked. ``shrink`` asks again for less, never for less than one token; ``head_within``
and ``spans_within`` cut what still does not fit (one dense chunk, a question longer than the budget)
to its first tokens, on a character boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from mixpr.tokens import count_tokens, encoding_for

__all__ = ["head_within", "is_count", "join_spans", "shrink", "spans_within"]

Found = TypeVar("Found")
# Each round asks for less by a growing multiple of the excess, and lands within it in a few.
ROUNDS = 6
# A head of n tokens is looked for in the text's first this many characters a token: tokens before the
# window's end are the whole text's (but the last piece's), and the head is recounted anyway.
_WINDOW_CHARS = 64


def is_count(value: object) -> bool:
    """A positive integer, as every budget and ``top_k`` must be: a bool is an int to Python, never a
    count (``budget_tokens=True`` is a mistake, not one token)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def shrink(run: Callable[[int], Found], tokens: Callable[[Found], int], budget: int, asked: int,
           rounds: int = ROUNDS) -> Found:  # fmt: skip
    """``run(asked)`` until ``tokens`` of what it returns is within ``budget``: each round asks for
    less by ``round`` times the excess, clamped at one token (the engine's least valid budget). Returns
    the last result, which is over the budget only when even one token asked was too much or the
    rounds ran out: the caller cuts it (``head_within``, ``spans_within``)."""
    asked = max(1, asked)
    found = run(asked)
    for attempt in range(1, rounds):
        excess = tokens(found) - budget
        if excess <= 0 or asked == 1:
            break
        asked = max(1, asked - excess * attempt)
        found = run(asked)
    return found


def head_within(text: str, budget: int, model: str | None) -> str:
    """``text``'s longest head of at most ``budget`` tokens, whole characters only ("" for a budget
    below one). Encodes once: the head is the first ``budget`` tokens' whole characters (a token can
    end inside one), stepped back while a re-encoding of it (tokens merge differently at its end) is
    still over."""
    encoding = encoding_for(model)
    window = text[: _WINDOW_CHARS * (budget + 1)]  # a 1M-token text is not encoded for a 30-token head
    ids = encoding.encode_ordinary(window)
    if len(ids) <= budget and len(window) < len(text):
        ids = encoding.encode_ordinary(text)
    if len(ids) <= budget:
        return text
    if budget < 1:
        return ""
    end = min(len(encoding.decode_bytes(ids[:budget]).decode("utf-8", errors="ignore")), len(text))
    while end > 0 and (excess := count_tokens(text[:end], model) - budget) > 0:
        end = max(0, end - excess)
    return text[:end]


def spans_within(text: str, spans: list[tuple[int, int]], budget: int,
                 model: str | None) -> tuple[str, list[tuple[int, int]]]:  # fmt: skip
    """Kept ``spans`` of ``text`` cut to their joined text's first ``budget`` tokens: the spans that
    fit, the last one shortened; and their joined text (``join_spans``)."""
    kept = join_spans(text, spans)
    length = len(head_within(kept, budget, model))
    if length == len(kept):
        return kept, list(spans)
    cut, at, previous = [], 0, None
    for start, end in spans:
        at += _gap(text, previous, start)
        if at >= length:
            break
        cut.append((start, min(end, start + length - at)))
        at += end - start
        previous = end
    return join_spans(text, cut), cut


def join_spans(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """The text of sorted, disjoint ``spans`` of ``text``; between two that do not touch, a newline if
    the gap held one, else a space (none after whitespace)."""
    parts, previous_end = [], None
    for start, end in spans:
        if _gap(text, previous_end, start):
            parts.append("\n" if "\n" in text[previous_end:start] else " ")
        parts.append(text[start:end])
        previous_end = end
    return "".join(parts)


def _gap(text: str, previous_end: int | None, start: int) -> int:
    """1 when ``join_spans`` puts a separator between a span ending at ``previous_end`` and the next."""
    return int(previous_end is not None and start != previous_end and not text[previous_end - 1].isspace())
