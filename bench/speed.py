"""Speed table: per-stage compress() times, peak RSS and the cost of merely counting the tokens.

    .venv/bin/python -m bench.speed                        # 32k, 128k, 1M, 10M book text + extra 1M rows
    .venv/bin/python -m bench.speed --sizes 32k,1M --no-flood
    .venv/bin/python -m bench.speed --publish              # also copy the PNG to bench/plots/

Book text is the shared haystack's novels (``bench.long_text``; CPython's language reference without
``../shared``), repeated to length. Extra rows at ``--flood-size``: ``sentences``, the old prompt of
random sentences from a dozen (a vocabulary of a few hundred words, far easier than real text), and
the two tiny-chunk floods. ``vocab`` is the text's distinct words as MixPR reads them.
Every case runs in a fresh subprocess so its peak RSS is its own. Sizes up to 1M report the median of
``--runs`` (3) compressions; bigger ones run once. ``count`` is plain tiktoken ``encode_ordinary`` on the same
text in the same process, and ``total/count`` is the ratio of their medians. ``(total-count)/count`` leaves
out compress()'s own count: the gateway has already counted the prompt to decide whether to compress.
Writes bench/out/speed.json and bench/out/speed.png (``--publish`` also copies the PNG to bench/plots/,
like the other benches: a quick or noisy run must not replace the published plot by the way).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.cli import format_size, parse_size
from bench.plotting import speed_plot
from bench.provenance import library_version

OUT = Path(__file__).with_name("out")
PLOTS = Path(__file__).with_name("plots")
EXTRAS = ("sentences", "flood-inline", "flood-lines")
# Targets for book text: seconds for compress() at a size (issue #31: 0.7 s at 1M; issue #2: 15 s at
# 10M), RSS at 1M (issue #2), and total vs tiktoken's count of the same text (issue #31: 2.5x).
MAX_SECONDS = {1024**2: 0.7, 10 * 1024**2: 15.0}
MAX_RSS_1M = 1.5e9
MAX_COUNT_RATIO = 2.5


def run_child(kind: str, tokens: int, runs: int, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "bench.speed_child", kind, str(tokens), str(runs)]
    print(f"... {kind} {format_size(tokens)} x{runs}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"kind": kind, "target_tokens": tokens, "error": f"timeout after {timeout:.0f} s"}
    if done.returncode != 0:
        return {"kind": kind, "target_tokens": tokens, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def verdict(row: dict) -> str:
    """Which speed targets the row misses ('ok' when none apply or all are met)."""
    misses = []
    limit = MAX_SECONDS.get(row["target_tokens"])
    if limit and row["kind"] == "books" and row["total_ms"] > limit * 1000:
        misses.append(f"total > {limit:g} s")
    if row["kind"] == "books" and row["target_tokens"] == 1024**2 and row["rss_peak"] > MAX_RSS_1M:
        misses.append("RSS > 1.5 GB")
    if row["kind"] == "books" and row["ratio"] > MAX_COUNT_RATIO:
        misses.append(f"total > {MAX_COUNT_RATIO:g}x count")
    return "**" + "; ".join(misses) + "**" if misses else "ok"


def markdown(rows: list[dict]) -> str:
    cols = [
        "case",
        "tokens",
        "vocab",
        "chunks",
        "chunk",
        "count",
        "embed",
        "rank",
        "select",
        "total ms",
        "tiktoken count ms",
        "total/count",
        "(total-count)/count",
        "RSS base MB",
        "RSS peak MB",
        "runs",
        "targets",
    ]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['kind']} {format_size(r['target_tokens'])} | error: {r['error']} |")
            continue
        st = r["stages_ms"]
        stages = [f"{st.get(s, 0):.0f}" for s in ("chunk", "count", "embed", "rank", "select")]
        lines.append(" | ".join([
            f"| {r['kind']} {format_size(r['target_tokens'])}", f"{r['tokens']:,}", f"{r['vocabulary']:,}",
            f"{r['chunks']:,}",
            *stages,
            f"{r['total_ms']:.0f}", f"{r['count_ms']:.0f}", f"{r['ratio']:.2f}",
            f"{r.get('ratio_after_count', float('nan')):.2f}",
            f"{r['rss_base'] / 1e6:.0f}", f"{r['rss_peak'] / 1e6:.0f}", str(r["runs"]), verdict(r) + " |",
        ]))  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="32k,128k,1M,10M", help="book-text sizes in tokens")
    ap.add_argument("--runs", type=int, default=3, help="runs per size up to 1M (median reported)")
    ap.add_argument("--flood-size", default="1M", help="size of the extra rows' texts")
    ap.add_argument("--no-flood", action="store_true", help="skip the extra rows (random sentences, floods)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before a case is abandoned")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--publish", action="store_true", help="also copy the PNG to bench/plots/")
    args = ap.parse_args(argv)

    cases = [("books", parse_size(s)) for s in args.sizes.split(",")]
    if not args.no_flood:
        cases += [(kind, parse_size(args.flood_size)) for kind in EXTRAS]
    load_before, version = os.getloadavg(), library_version()
    rows = [run_child(kind, n, args.runs if n <= 1024**2 else 1, args.timeout) for kind, n in cases]
    load = {
        "before": load_before,
        "after": os.getloadavg(),
        "cpus": os.cpu_count(),
        "library": version,
    }
    for row in rows:
        row["loadavg"] = load
    print(markdown(rows))
    # Times on a shared box mean little without the load they were taken under.
    before, after = load["before"], load["after"]
    print(
        f"\nload average (1/5/15 min): before {before}, after {after}, {load['cpus']} CPUs;"
        f" library {load['library']}"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "speed.json").write_text(json.dumps(rows, indent=1))
    books = [r for r in rows if r["kind"] == "books" and "error" not in r]
    if books:
        speed_plot(books, args.out / "speed.png")
    if books and args.publish:
        PLOTS.mkdir(exist_ok=True)
        shutil.copy(args.out / "speed.png", PLOTS / "speed.png")


if __name__ == "__main__":
    main()
