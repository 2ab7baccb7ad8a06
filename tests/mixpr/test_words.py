import random
import re

import numpy as np
import pytest

from mixpr import words
from mixpr.words import find_words

# What the vectorised reader must reproduce: the regex the word counts used before (embedding).
REFERENCE = re.compile(r"\w\w+|\d")
# ASCII, accents, a superscript two (a word character, not a decimal digit), Arabic-Indic and
# mathematical digits, CJK, a dotted capital I (lower-cases to two characters), capital and final
# sigma (lower-cased by context), titlecase digraphs, a no-break and a zero-width space.
ALPHABET = [*"aAbZ_09 .,\n\t\x00", *"éÉ²٣𝟘中文İΣςǅßﬁ", "\xa0", "\u200b"]


def reference(texts: list[str]) -> tuple[list[tuple[int, str]], list[str]]:
    """(row, word) for every word, and the distinct words in order of first appearance."""
    found = [(row, w) for row, text in enumerate(texts) for w in REFERENCE.findall(text.lower())]
    return found, list(dict.fromkeys(w for _, w in found))


def read(texts: list[str]) -> tuple[list[tuple[int, str]], list[str]]:
    got = find_words(texts)
    found = zip(got.rows.tolist(), got.ids.tolist(), strict=True)
    return [(row, got.vocabulary[i]) for row, i in found], got.vocabulary


def random_texts(rng: random.Random, alphabet: list[str], longest: int) -> list[str]:
    return ["".join(rng.choices(alphabet, k=rng.randint(0, longest))) for _ in range(rng.randint(0, 5))]


def test_reads_the_same_words_as_the_regex_on_mixed_scripts():
    rng = random.Random(7)
    for _ in range(2000):
        texts = random_texts(rng, ALPHABET, 30)
        assert read(texts) == reference(texts), texts


def test_a_word_is_not_split_where_a_hashing_block_ends(monkeypatch):
    monkeypatch.setattr(words, "_BLOCK", 4)  # blocks shorter than the words: every word crosses one
    rng = random.Random(8)
    for _ in range(300):
        texts = random_texts(rng, ["a", "b", "é", " ", "9"], 60)
        assert read(texts) == reference(texts), texts


@pytest.mark.parametrize("text", ["", " ", "x", "7", "²", "ΟΔΟΣ ΟΔΟΣ", "İstanbul istanbul"])
def test_edge_cases(text):
    assert read([text, text]) == reference([text, text])


def test_words_whose_digests_collide_still_get_their_own_ids(monkeypatch):
    monkeypatch.setattr(words, "_DIGEST_MIX", np.uint64(0))  # every word's 32-bit digest is 0
    texts = ["one two three two one", "three four"]
    assert read(texts) == reference(texts)
