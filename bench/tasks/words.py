"""Word sources that replace the `wonderwords` package: shipped adjective/noun lists and book vocabulary."""

from __future__ import annotations

import random
import string
from functools import cache
from pathlib import Path

from bench.data import book_vocabulary

_LISTS = Path(__file__).with_name("wordlists")


@cache
def _read(name: str) -> tuple[str, ...]:
    return tuple(w for w in (_LISTS / name).read_text().split() if w)


def adjectives() -> tuple[str, ...]:
    return _read("adjectives.txt")


def nouns() -> tuple[str, ...]:
    return _read("nouns.txt")


def adjective_noun(rng: random.Random) -> str:
    """A RULER 'words' key such as gentle-harbor."""
    return f"{rng.choice(adjectives())}-{rng.choice(nouns())}"


def distinct_keys(rng: random.Random, n: int) -> list[str]:
    keys: list[str] = []
    while len(keys) < n:
        key = adjective_noun(rng)
        if key not in keys:
            keys.append(key)
    return keys


def common_word_pool(n: int, rng: random.Random) -> list[str]:
    """n distinct words for cwe, drawn from the books' vocabulary.

    RULER falls back to a big English list when wonderwords runs out; our books hold ~27k distinct words,
    so past that we add compounds of two book words (a 1M-token cwe list needs ~70k words). They are
    written closed ("riverstone"), not hyphenated: a hyphen would split them back into book words that
    recur across many compounds, so every word would no longer be either common (x30) or rare (x3).
    """
    vocab = list(book_vocabulary())
    if n <= len(vocab):
        return rng.sample(vocab, n)
    words = set(vocab)
    while len(words) < n:
        words.add(f"{rng.choice(vocab)}{rng.choice(vocab)}")
    out = sorted(words)
    rng.shuffle(out)
    return out


def random_letters(rng: random.Random, n: int, alphabet: str = string.ascii_lowercase) -> str:
    return "".join(rng.choices(alphabet, k=n))
