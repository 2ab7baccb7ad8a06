"""Where compress() spends its time on book text, as CPU time and as a ratio to tiktoken's count.

    .venv/bin/python -m bench.speed_profile                 # 1M tokens of book text, best of 5
    .venv/bin/python -m bench.speed_profile --size 128k --runs 9

Each of MixPR's steps (chunking, the token count, the word counts, BM25, the graph experts, the
structure pass, selection...) is wrapped with a timer of the thread's CPU time, and the best of
``--runs`` compressions is kept, beside the best of as many tiktoken counts of the same text. CPU time,
unlike wall time, barely moves when other processes share the cores (issue #31: seven helpers on two
cores), so the ratios stay comparable between runs; ``bench.speed`` gives the wall times. Nested steps
(the PageRanks inside the local expert) are listed too, so the column does not add up to the total.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Callable

import mixpr
from bench.cli import parse_size
from bench.speed_child import book_text
from mixpr import bridge, embedding, experts, headings, lexical, pagerank, structure
from mixpr.tokens import count_tokens

# (module, function): the steps of compress() on the local route (the route book text takes).
STEPS = [
    (mixpr, "chunk_text"), (mixpr, "count_tokens"), (headings, "titles"), (mixpr, "counts_and_words"),
    (headings, "with_headings"), (mixpr, "bm25"), (lexical, "query_vector"), (mixpr, "unit_rows"),
    (experts, "local_scores"), (pagerank, "factorised"), (pagerank, "pruned"), (bridge, "bridge_scores"),
    (structure, "arrange"), (mixpr, "_select"),
]  # fmt: skip


def timed(spent: dict[str, float], label: str, fn: Callable) -> Callable:
    """``fn``, adding its CPU seconds to ``spent[label]``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.thread_time() - started

    return wrapper


def instrument(spent: dict[str, float]) -> None:
    for module, name in STEPS:
        label = f"{module.__name__.removeprefix('mixpr.')}.{name}"
        setattr(module, name, timed(spent, label, getattr(module, name)))


def cpu_seconds(fn: Callable, *args, **kwargs) -> float:
    started = time.thread_time()
    fn(*args, **kwargs)
    return time.thread_time() - started


def profile(text: str, runs: int) -> tuple[dict[str, float], float]:
    """Best CPU seconds per step (and "total") over ``runs`` compressions; best count of the text."""
    spent: dict[str, float] = {}
    instrument(spent)
    best: dict[str, float] = {}
    counts = []
    for _ in range(runs):
        spent.clear()
        spent["total"] = cpu_seconds(mixpr.compress, text, budget_tokens=4000)
        best = {step: min(best.get(step, float("inf")), s) for step, s in spent.items()}
        counts.append(cpu_seconds(count_tokens, text))
    return best, min(counts)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1M", help="tokens of book text")
    ap.add_argument("--runs", type=int, default=5, help="compressions (best kept)")
    args = ap.parse_args(argv)
    text = book_text(parse_size(args.size))
    embedding.counts_and_words(["warm up"])  # first-use costs (tables, encodings) stay out
    count_tokens("warm up")
    best, count = profile(text, args.runs)
    print(f"{args.size} tokens of book text; tiktoken count {count * 1000:.0f} ms CPU (best of {args.runs})")
    print("| step | CPU ms | × count |\n|---|---|---|")
    for step, seconds in sorted(best.items(), key=lambda item: -item[1]):
        print(f"| {step} | {seconds * 1000:.0f} | {seconds / count:.2f} |")
    print(f"\nload average (1/5/15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
