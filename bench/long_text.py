"""Long prompts for the speed benches, from real books (issue #31).

A prompt built from a dozen sentences drawn at random has a vocabulary of a few hundred words, which makes
TF-IDF, the graph and PageRank cheap; what users send has tens of thousands. So ``bench.speed`` and
``bench.gateway_latency`` cut their long prompts from the shared haystack's novels (``../shared/data``,
as the NIAH samples of ``bench.tasks`` use them), or, in a clone without ``../shared``, from the Python
language reference every CPython ships (``pydoc_data.topics``, what the tests fall back to), repeated to
length. ``sentences`` keeps the old random-sentence text, for a row labelled as such.
"""

from __future__ import annotations

import random
from functools import cache
from pydoc_data.topics import topics

from bench.data import books
from bench.tokens import count_tokens
from mixpr.words import find_words

# The random-sentence filler the gateway tests use (tests/gateway/corpus.py), for the labelled extra row.
from tests.gateway.corpus import SENTENCES


@cache
def source() -> tuple[str, str]:
    """(name, text): the shared haystack's novels, else CPython's language reference."""
    try:
        return "books", "\n\n".join(books())
    except FileNotFoundError:
        return "python reference", "\n\n".join(topics[name] for name in sorted(topics))


def count_in_pieces(text: str, piece: int = 1_000_000) -> int:
    """Token count without holding a 10M-id list: pieces keep the probe's memory out of the RSS figure."""
    return sum(count_tokens(text[i : i + piece]) for i in range(0, len(text), piece))


def repeated(unit: str, tokens: int, sep: str = "\n\n") -> str:
    """``unit`` repeated (joined by ``sep``) and cut to about ``tokens`` cl100k tokens (within ~1%)."""
    want = tokens * len(unit) // count_in_pieces(unit)
    for _ in range(2):  # one measured correction is enough
        text = (sep.join([unit] * (want // len(unit) + 1)))[:want]
        want = want * tokens // count_in_pieces(text)
    return text


def book_text(tokens: int) -> str:
    """About ``tokens`` tokens of ``source()`` (10M tokens is ~5 passes over the 13 novels)."""
    return repeated(source()[1], tokens)


def sentence_text(tokens: int, seed: int = 0) -> str:
    """About ``tokens`` tokens of paragraphs of six sentences drawn at random from ``SENTENCES``."""
    rng = random.Random(seed)
    paragraphs = [" ".join(rng.choice(SENTENCES) for _ in range(6)) for _ in range(tokens // 115 + 1)]
    return repeated("\n\n".join(paragraphs), tokens)


def vocabulary(text: str) -> int:
    """Distinct words in ``text``, as MixPR reads them (``mixpr.words``: 2+ word characters or a digit)."""
    return len(find_words([text]).vocabulary)
