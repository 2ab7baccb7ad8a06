"""A term the question puts in quotes is matched where the text puts it in quotes: its definition.

A question quotes the term it is about ('related to "Parties"', 'what does "Licensed Product" mean');
a contract, a standard or a paper defines a term by quoting it ('collectively, the "Parties"'). The
term's words alone are often in most of the text ("parties" in every clause of a contract), so the
lexical expert drops them as stop words, and the definition shares no other word with the question.
The chunks that quote a term the question quotes join the local expert's fusion as a list of their
own (at ``WEIGHT``, as ``mixpr.order``'s), as a search engine matches a quoted phrase exactly. One
pass of one pattern over the text.
"""

from __future__ import annotations

import re

import numpy as np

from mixpr.chunking import Chunks

# A quoted term starts and ends inside its quotes: in 'a "" and "!!"', " and " is between two quotes.
_QUOTED = re.compile(r"[\"“]([^\"“”\s](?:[^\"“”\n]{0,58}[^\"“”\s])?)[\"”]")
WEIGHT = 2.0
MAX_TERMS = 4  # a question quoting more than this is quoting text, not naming its terms


def terms(question: str) -> list[str]:
    """The terms ``question`` puts in double quotes (none when it quotes more than ``MAX_TERMS``)."""
    found = [" ".join(t.split()).rstrip(".,;:") for t in _QUOTED.findall(question)]
    found = [t for t in found if any(c.isalnum() for c in t)]
    return found if len(found) <= MAX_TERMS else []


def quoting(chunks: Chunks, wanted: list[str]) -> np.ndarray:
    """The chunks whose text puts one of ``wanted`` in double quotes (case and spacing aside)."""
    if not wanted:
        return np.zeros(0, dtype=np.int64)
    phrases = "|".join(r"\s+".join(map(re.escape, t.split())) for t in wanted)
    # a closing stop or comma inside the quotes, as American style writes it ('the "Parties."')
    pattern = re.compile(rf"[\"“](?:{phrases})[.,;:]?[\"”]", re.IGNORECASE)
    at = [m.start() for m in pattern.finditer(chunks.text)]
    return np.unique(np.searchsorted(chunks.starts, np.array(at, dtype=np.int64), side="right") - 1)
