"""One speed case in a fresh process: build the text, time compress() and tiktoken, report peak RSS as JSON.

Invoked by bench.speed as ``python -m bench.speed_child KIND TOKENS RUNS``.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import time
from statistics import median

import psutil

from bench import long_text
from bench.data import book_vocabulary
from bench.tokens import count_tokens

QUESTION = "\n\nQuestion: Who knocked at the door late that evening, and what did they want?"
STAGES = ("chunk", "count", "embed", "route", "rank", "select", "total")


def book_text(tokens: int) -> str:
    """Book text cycled as needed (``bench.long_text``), and a question."""
    return long_text.book_text(tokens) + QUESTION


def sentence_text(tokens: int) -> str:
    """The old random-sentence prompt (a vocabulary of a few hundred words), for its labelled row."""
    return long_text.sentence_text(tokens) + QUESTION


def flood_text(kind: str, tokens: int) -> str:
    """1M tokens of one-word items: an inline 'N. word' list (cwe-style) or one word per line."""
    rng = random.Random(0)
    vocab = book_vocabulary()
    per_item = 4.2 if kind == "flood-inline" else 2.0  # first guess, corrected below
    n = int(tokens / per_item)
    for _ in range(2):
        words = rng.choices(vocab, k=n)
        body = (
            " ".join(f"{i}. {w}" for i, w in enumerate(words, 1))
            if kind == "flood-inline"
            else "\n".join(words)
        )
        n = int(n * tokens / count_tokens(body))
    return body + "\nQuestion: What are the 10 most common words in the above list?"


def main() -> None:
    kind, tokens, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    from mixpr import compress

    compress(
        book_text(4096), budget_tokens=4000
    )  # warm-up: imports and one-time setup stay out of the numbers
    texts = {"books": book_text, "sentences": sentence_text}
    text = texts[kind](tokens) if kind in texts else flood_text(kind, tokens)
    rss_base = psutil.Process().memory_info().rss
    stats, walls = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = compress(text, budget_tokens=4000)
        walls.append((time.perf_counter() - t0) * 1000)
        stats.append(r.stats)
    # Peak before the count step: a 10M-token id list alone would add ~400 MB that compress() never needs.
    rss_peak = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, psutil.Process().memory_info().rss
    )
    counts, n_tokens = [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        n_tokens = count_tokens(text)
        counts.append((time.perf_counter() - t0) * 1000)
    timings = [s.get("timings_ms", {}) for s in stats]
    stages = {k: median(t.get(k, 0.0) for t in timings) for k in STAGES}
    total, count = stages.pop("total"), median(counts)
    print(json.dumps({
        "kind": kind, "source": long_text.source()[0] if kind == "books" else kind,
        "vocabulary": long_text.vocabulary(text),
        "target_tokens": tokens, "tokens": n_tokens, "chars": len(text), "runs": runs,
        "chunks": stats[0].get("original_chunks"), "kept_tokens": stats[0].get("kept_tokens"),
        "route": stats[0].get("route"), "stages_ms": stages, "total_ms": total, "wall_ms": median(walls),
        "count_ms": count, "ratio": total / count,
        "ratio_after_count": (total - stages.get("count", 0.0)) / count,
        "rss_base": rss_base, "rss_peak": rss_peak,
        "all_total_ms": [t.get("total") for t in timings], "all_count_ms": counts,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
