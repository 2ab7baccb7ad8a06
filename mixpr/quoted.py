"""A term the question puts in quotes is matched where the text puts it in quotes: its definition.

A question quotes the term it is about ('related to "Parties"', 'what does "Licensed Product" mean');
a contract, a standard or a paper defines a term by quoting it ('collectively, the "Parties"'). The
term's words alone are often in most of the text ("parties" in every clause of a contract), so the
lexical expert drops them as stop words, and the definition shares no other word with the question.
The chunks that quote a term the question quotes join the local expert's fusion as a list of their
own (at ``WEIGHT``, as ``mixpr.order``'s), as a search engine matches a quoted phrase exactly. One
pass of one pattern a term over the text. Measured (issue 45) with ``mixpr.lexical``'s compounds: over
the dev conversations' whole pastes (``python -m bench.paste_ranks``) contracts hold 76, 87, 91, 93 of
108 answers at 2k, 4k, 8k, 16k (72, 81, 86, 88 with compounds alone); ``bench.real_docs`` contracts
single 0.65 -> 0.69 at 1k and haystack 0.68 -> 0.73, every other cell the same, no question lost.
"""

from __future__ import annotations

import re

import numpy as np

from mixpr.chunking import Chunks
from mixpr.experts import STOP_WORD_SHARE

MAX_TERM_CHARS = 60  # a term, not a quoted sentence
# A quoted term starts and ends inside its quotes: in 'a "" and "!!"', " and " is between two quotes.
_QUOTED = re.compile(rf"[\"“]([^\"“”\s](?:[^\"“”]{{0,{MAX_TERM_CHARS - 2}}}[^\"“”\s])?)[\"”]")
_TRAILING = ".,;:?!"  # a stop inside the closing quote, as American style writes it ('the "Parties."')
WEIGHT = 2.0
MAX_TERMS = 4  # a question quoting more than this is quoting text, not naming its terms


def terms(question: str) -> list[str]:
    """The terms ``question`` puts in double quotes (none when it quotes more than ``MAX_TERMS``)."""
    found = [" ".join(t.split()).rstrip(_TRAILING) for t in _QUOTED.findall(question)]
    found = [t for t in found if any(c.isalnum() for c in t)]
    return found if len(found) <= MAX_TERMS else []


def quoting(chunks: Chunks, wanted: list[str]) -> np.ndarray:
    """The chunks whose text puts one of ``wanted`` in double quotes (case and spacing aside); not a
    term quoted in more than ``STOP_WORD_SHARE`` of them (dialogue's "Yes", a JSON key): a definition
    is quoted in few places. One pass of one pattern per term (at most ``MAX_TERMS``)."""
    found = [_quoting(chunks, term) for term in wanted]
    found = [rows for rows in found if len(rows) <= STOP_WORD_SHARE * len(chunks)]
    return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


def _quoting(chunks: Chunks, term: str) -> np.ndarray:
    phrase = r"\s+".join(map(re.escape, term.split()))
    pattern = re.compile(rf"[\"“]{phrase}[{re.escape(_TRAILING)}]?[\"”]", re.IGNORECASE)
    at = np.fromiter((m.start() for m in pattern.finditer(chunks.text)), dtype=np.int64)
    # the chunk holding the opening quote (chunks cover the text: none starts after a quote it holds)
    return np.unique(np.maximum(np.searchsorted(chunks.starts, at, side="right") - 1, 0))
