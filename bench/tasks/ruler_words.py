"""RULER aggregation tasks: common words extraction (cwe) and frequent words extraction (fwe)."""

from __future__ import annotations

import math
import random

from bench.tasks.prompt import assemble
from bench.tasks.sample import Sample, fit_to_length
from bench.tasks.words import common_word_pool, random_letters

CWE_HEAD = (
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n"
)
CWE_TAIL = "\nQuestion: What are the 10 most common words in the above list?"
CWE_ANSWER = " Answer: The top 10 words that appear most often in the list are:"
CWE_NUM_COMMON = 10

FWE_HEAD = (
    "Read the following coded text and track the frequency of each coded word. "
    "Find the three most frequently appeared coded words. "
)
FWE_TAIL = (
    "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. "
    "What are the three most frequently appeared words in the above coded text?"
)
FWE_ANSWER = " Answer: According to the coded text above, the three most frequently appeared words are:"
FWE_ALPHA = 2.0
NOISE_WORD = "..."


def numbered(words: list[str]) -> str:
    return " ".join(f"{i}. {w}" for i, w in enumerate(words, 1))


def _cwe_list(words: list[str], freq_common: int, freq_rare: int, rng: random.Random) -> list[str]:
    items = [w for w in words[:CWE_NUM_COMMON] for _ in range(freq_common)]
    items += [w for w in words[CWE_NUM_COMMON:] for _ in range(freq_rare)]
    rng.shuffle(items)
    return items


def _cwe_example(words: list[str], small: bool, rng: random.Random) -> str:
    """One solved prompt (40 words: 10 x10 and 30 x3; 20 words x3/x1 below 4k), then a newline."""
    freqs = (3, 1) if small else (10, 3)
    context = numbered(_cwe_list(words, *freqs, rng))
    return CWE_HEAD + context + CWE_TAIL + CWE_ANSWER + " " + numbered(words[:CWE_NUM_COMMON]) + "\n"


def generate_cwe(task: str, length: int, seed: int) -> Sample:
    small = length < 4096
    n_example = 20 if small else 40
    freqs = (6, 1) if small else (30, 3)

    def build(n: int) -> Sample:
        rng = random.Random(f"{task}/{seed}")
        n = max(n, CWE_NUM_COMMON + 1)
        pool = common_word_pool(n + n_example, rng)  # disjoint words for the example and the real list
        example, words = pool[:n_example], pool[n_example:]
        context = numbered(_cwe_list(words, *freqs, rng))
        head = _cwe_example(example, small, rng) + CWE_HEAD
        return assemble(
            head,
            context,
            CWE_TAIL + CWE_ANSWER,
            needles=[],
            family="global",
            task=task,
            top_words=words[:CWE_NUM_COMMON],
            length=length,
            seed=seed,
        )

    target = length - 120
    return fit_to_length(build, target, target // 15)


def zipf_counts(n_occurrences: int, vocab_size: int, alpha: float = FWE_ALPHA) -> list[int]:
    """floor(N * k^-alpha / zeta(alpha)) occurrences for the word at rank k (1-based)."""
    zeta = math.pi**2 / 6 if alpha == 2.0 else sum(k**-alpha for k in range(1, 100000))
    return [math.floor(n_occurrences * k**-alpha / zeta) for k in range(1, vocab_size + 1)]


def generate_fwe(task: str, length: int, seed: int) -> Sample:
    vocab_size = (length - 50) // 50

    def build(n: int) -> Sample:
        rng = random.Random(f"{task}/{seed}")
        vocab: list[str] = []
        seen = set()
        while len(vocab) < vocab_size:
            if (w := random_letters(rng, 6)) not in seen:
                seen.add(w)
                vocab.append(w)
        vocab[0] = NOISE_WORD  # rank 1 is the '...' noise word
        words = [w for w, c in zip(vocab, zipf_counts(n, vocab_size), strict=True) for _ in range(c)]
        rng.shuffle(words)
        return assemble(
            FWE_HEAD,
            " ".join(words),
            FWE_TAIL + FWE_ANSWER,
            needles=[],
            family="global",
            task=task,
            top_words=vocab[1:4],
            length=length,
            seed=seed,
        )

    target = length - 50
    return fit_to_length(build, target, target // 2)
