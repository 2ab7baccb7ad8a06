"""Tiny text helpers shared by the generators (no NLTK: a regex sentence splitter is enough for filler)."""

from __future__ import annotations

import re

# A sentence ends at . ! or ? (optionally followed by closing quotes/brackets) before whitespace and a
# capital letter or an opening quote. Good enough for novels; exact punkt behaviour does not matter here.
_SENT_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*(\s+)(?=[\"'“‘(\[]?[A-Z])")


def collapse_ws(text: str) -> str:
    return " ".join(text.split())


def sentence_ends(text: str) -> list[int]:
    """Offsets of the whitespace that ends each sentence (after any closing quote), in collapsed text."""
    return [m.start(1) for m in _SENT_END.finditer(text)]


def split_sentences(text: str) -> list[str]:
    text = collapse_ws(text)
    cuts = [0, *(m.end() for m in _SENT_END.finditer(text)), len(text)]
    return [s for a, b in zip(cuts, cuts[1:], strict=False) if (s := text[a:b].strip())]


def join_and(items: list[str]) -> str:
    """RULER's query list: 'k1, k2, k3, and k4' (a comma, then ', and ' before the last key)."""
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]
