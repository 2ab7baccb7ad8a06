"""The Sample every generator returns, and the length-fitting loop they share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bench.tokens import count_tokens

FAMILIES = ("single", "multi", "global")


@dataclass
class Sample:
    text: str  # full prompt: context first, question / answer prefix at the very end
    needles: list[str]  # exact substrings of `text` that a compressor must keep
    family: str  # "single" | "multi" | "global"
    task: str
    top_words: list[str] = field(default_factory=list)  # global tasks: the words the answer lists
    context_span: tuple[int, int] = (0, 0)  # char span of the compressible haystack inside `text`
    query: str = ""  # the verbatim tail (question + answer prefix)
    length: int = 0  # target length in cl100k tokens
    seed: int = 0
    tokens: int = 0  # measured cl100k length of `text`


def fit_to_length(build: Callable[[int], Sample], target: int, guess: int, tol: float = 0.015) -> Sample:
    """Find a unit count n (words, lines, chains...) so that build(n) is ~target tokens long.

    Token count is close to affine in n, so a proportional first step plus secant steps converges in 2-3
    builds; each build is one tiktoken pass, which keeps 1M-token samples at a few seconds.
    """
    points: list[tuple[int, int, Sample]] = []
    n = max(1, guess)
    for _ in range(6):
        sample = build(n)
        sample.tokens = count_tokens(sample.text)
        points.append((n, sample.tokens, sample))
        if abs(sample.tokens - target) <= tol * target:
            break
        n = _next_guess(points, target)
        if any(n == p[0] for p in points):
            break
    return min(points, key=lambda p: abs(p[1] - target))[2]


def _next_guess(points: list[tuple[int, int, Sample]], target: int) -> int:
    if len(points) == 1:
        n, t, _ = points[0]
        return max(1, round(n * target / max(t, 1)))
    (n1, t1, _), (n2, t2, _) = points[-2], points[-1]
    if t2 == t1:
        return max(1, round(n2 * target / max(t2, 1)))
    slope = (t2 - t1) / (n2 - n1)
    return max(1, round(n2 + (target - t2) / slope))
