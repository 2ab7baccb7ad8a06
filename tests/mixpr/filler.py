"""Deterministic book-like filler for tests: no file or network needed."""

import random

_WORDS = (
    "river morning garden letter window stone journey silver captain village winter lantern harbor "
    "meadow candle forest bridge market soldier doctor evening mountain cottage weather quiet ancient "
    "distant golden narrow gentle bright heavy silent walked carried opened remembered watched "
    "followed wondered answered listened turned smiled"
).split() + ["the", "the", "the", "and", "and", "of", "to", "was", "in", "he", "she", "it"]


def sentences(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words = rng.choices(_WORDS, k=rng.randint(6, 18))
        out.append(" ".join(words).capitalize() + ".")
    return out


def haystack(count: int, inserts: dict[int, str], seed: int = 0) -> str:
    """``count`` filler sentences with ``inserts[i]`` placed before sentence i."""
    parts = []
    for i, sentence in enumerate(sentences(count, seed)):
        if i in inserts:
            parts.append(inserts[i])
        parts.append(sentence)
    return " ".join(parts)
