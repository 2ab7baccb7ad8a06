"""RULER haystacks (noise lines, book 'essay', needle-like distractor lines) and needle insertion."""

from __future__ import annotations

import random
from collections.abc import Callable

from bench.data import corpus_words
from bench.text import sentence_ends

NOISE_LINE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
# RULER's 40 insertion depths: round(linspace(0, 100, 40)) percent.
DEPTHS = tuple(round(i * 100 / 39) for i in range(40))


def essay_text(n_words: int) -> str:
    """The first n words of the book corpus (cycled if it runs out), joined by single spaces."""
    words = corpus_words()
    if n_words <= len(words):
        return " ".join(words[:n_words])
    reps, rest = divmod(n_words, len(words))
    return " ".join(words * reps + words[:rest])


def insert_lines(lines: list[str], needles: list[str], rng: random.Random) -> list[str]:
    """Needles become extra lines at distinct uniform-random line indices (noise / needle haystacks)."""
    out = list(lines)
    slots = sorted(rng.sample(range(len(out) + 1), len(needles)), reverse=True)
    for slot, needle in zip(slots, reversed(needles), strict=True):
        out.insert(slot, needle)
    return out


def insert_at_depths(essay: str, needles: list[str], rng: random.Random) -> str:
    """Splice needles between sentences at depths drawn without replacement from the 40 RULER depths."""
    ends = sentence_ends(essay)
    n_sents = len(ends) + 1
    depths = rng.sample(DEPTHS, len(needles))
    positions = sorted(int(n_sents * d / 100) for d in depths)
    cuts = [0 if p == 0 else len(essay) if p >= n_sents else ends[p - 1] for p in positions]
    pieces, prev = [], 0
    for cut, needle in zip(cuts, needles, strict=True):
        pieces += [essay[prev:cut], needle]
        prev = cut
    pieces.append(essay[prev:])
    return " ".join(p.strip() for p in pieces if p.strip())


def noise_context(n_lines: int, needles: list[str], rng: random.Random) -> str:
    return "\n".join(insert_lines([NOISE_LINE] * n_lines, needles, rng))


def needle_context(
    n_lines: int, needles: list[str], rng: random.Random, make_line: Callable[[random.Random], str]
) -> str:
    """Every filler line is itself a needle-format sentence with a fresh key and value (hard distractors)."""
    return "\n".join(insert_lines([make_line(rng) for _ in range(n_lines)], needles, rng))
