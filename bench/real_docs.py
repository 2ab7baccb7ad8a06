"""Evidence recall on real documents with real questions (issue #7; protocol: ../shared/data/real/README.md).

    .venv/bin/python -m bench.real_docs              # full dev table + budget curve (~10 min on 2 cores)
    .venv/bin/python -m bench.real_docs --quick      # 3 documents per file, no curve (~1 min)
    .venv/bin/python -m bench.real_docs --publish    # also copy the PNGs to bench/plots/

Per file x setting: single = one document, budget 1000 tokens; haystack = the document shuffled among 4
other documents of the same file (seeded per document), blank lines between, budget 4000 tokens. The
compressor gets ``document + "\\n\\n" + question``. Evidence kept = some occurrence of the answer inside the
target document is at least 90% covered by ``Compressed.spans``. Only questions whose answer occurs
verbatim in their document count. Methods: mixpr (heuristic route), BM25 (bm25s, default parameters, over
mixpr's own chunks, the whole question as query, best-first into the same budget, question kept),
rag-sparse, middle-out, and LiteLLM's ``litellm.compress()`` (documents only; ``bench.litellm_compress``).
The curve: recall against budget on single documents for mixpr and BM25.
Writes bench/out/real_docs.json, real_docs.png and real_docs_budget.png.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING

import numpy as np

from bench import litellm_compress, real_sets
from bench.data import data_dir
from bench.plotting import budget_curve_plot, real_docs_plot
from bench.provenance import library_version

if TYPE_CHECKING:
    from mixpr.chunking import Chunks

OUT = Path(__file__).with_name("out")
PLOTS = Path(__file__).with_name("plots")
FILES = {"nq": "natural_question", "contracts": "legal_contract_qa", "papers": "scientific_qa"}
SETTINGS = {"single": 1000, "haystack": 4000}
METHODS = ["mixpr", "bm25", "rag-sparse", "middle-out", "litellm-compress"]
LITELLM = "litellm-compress"  # L-Eval documents only (bench.litellm_compress)
CURVE_METHODS = ["mixpr", "bm25"]
CURVE_BUDGETS = [500, 1000, 2000, 4000, 8000]
HAYSTACK_DOCS = 5
COVERED = 0.9
QUICK_DOCS = 3


@dataclass(frozen=True)
class Case:
    """One question over one compressor input; ``answers``: where the answer is in the target document."""

    file: str
    doc: int
    question: str
    text: str
    answers: tuple[tuple[int, int], ...]


def load(file: str, split: str = "dev") -> list[dict]:
    path = data_dir() / "real" / f"{FILES[file]}.{split}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def occurrences(text: str, needle: str, lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    """Every (start, end) of ``needle`` in ``text[lo:hi]``, overlapping ones included."""
    found, start = [], text.find(needle, lo, hi)
    while start >= 0:
        found.append((start, start + len(needle)))
        start = text.find(needle, start + 1, hi)
    return tuple(found)


def haystack_order(file: str, doc: int, n_docs: int) -> list[int]:
    """The target and 4 other documents of its file, shuffled; seeded by (file, document) only."""
    rng = random.Random(f"{file}/{doc}")
    others = rng.sample([i for i in range(n_docs) if i != doc], HAYSTACK_DOCS - 1)
    order = [doc, *others]
    rng.shuffle(order)
    return order


def cases(file: str, rows: list[dict], setting: str, docs: Sequence[int]) -> Iterator[Case]:
    for doc in docs:
        row = rows[doc]
        order = haystack_order(file, doc, len(rows)) if setting == "haystack" else [doc]
        body, start = "", 0
        for i in order:
            if i == doc:
                start = len(body) + (2 if body else 0)
            body = f"{body}\n\n{rows[i]['input']}" if body else rows[i]["input"]
        end = start + len(row["input"])
        for question, answer in zip(row["instructions"], row["outputs"], strict=True):
            if answer and answer in row["input"]:
                text = f"{body}\n\n{question}"
                yield Case(file, doc, question, text, occurrences(text, answer, start, end))


def evidence_kept(answers: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> bool:
    """Some answer occurrence has at least 90% of its characters inside the kept spans."""
    if not spans:
        return False
    starts = np.array([s for s, _ in spans])
    ends = np.array([e for _, e in spans])
    for a, b in answers:
        covered = np.clip(np.minimum(ends, b) - np.maximum(starts, a), 0, None).sum()
        if covered >= COVERED * (b - a):
            return True
    return False


def bm25_spans(text: str, question_start: int, budget: int) -> list[tuple[int, int]]:
    """BM25 (bm25s defaults) over mixpr's chunks; the question's chunks are kept and are the query."""
    chunks, keep = bm25_select(text, question_start, budget)
    return list(zip(chunks.starts[keep].tolist(), chunks.ends[keep].tolist(), strict=True))


def bm25_select(text: str, question_start: int, budget: int) -> tuple[Chunks, np.ndarray]:
    """The chunks of ``text`` and the sorted indices BM25 keeps within ``budget`` tokens."""
    from mixpr import selection

    chunks, scores, sizes = _bm25_scores(text, question_start)
    pinned = np.flatnonzero(chunks.ends > question_start)
    return chunks, selection.within_budget(scores, sizes, budget, pinned)


@functools.lru_cache(maxsize=2)
def _bm25_scores(text: str, question_start: int) -> tuple[Chunks, np.ndarray, np.ndarray]:
    """Chunks, BM25 scores and token sizes; cached, as a chat is asked at two budgets in a row."""
    import bm25s

    from mixpr.chunking import chunk_text
    from mixpr.tokens import encoding_for

    chunks = chunk_text(text)
    texts = chunks.texts()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, show_progress=False), show_progress=False)
    query = bm25s.tokenize([text[question_start:]], return_ids=False, show_progress=False)[0]
    scores = retriever.get_scores(query) if query else np.zeros(len(texts))
    sizes = np.array([len(t) for t in encoding_for(None).encode_ordinary_batch(texts)], dtype=np.float64)
    return chunks, np.asarray(scores, dtype=np.float64), sizes


def kept_spans(method: str, case: Case | real_sets.Case, budget: int) -> list[tuple[int, int]]:
    from mixpr.engine import compress

    sent = getattr(case, "query_span", None)  # a chat sent as messages: the gateway's structure
    question_start = sent[0] if sent else len(case.text) - len(case.question)
    if method == "bm25":
        return bm25_spans(case.text, question_start, budget)
    if method == LITELLM:
        return litellm_compress.kept_spans(case.text, question_start, budget)
    kwargs = {"route": "heuristic"} if method == "mixpr" else {}
    if sent:
        kwargs.update(boundaries=case.boundaries, query_span=sent)
    return compress(case.text, budget_tokens=budget, method=method, **kwargs).spans


def run(files: list[str], methods: list[str], quick: bool, curve: bool) -> list[dict]:
    rows: list[dict] = []
    for file in files:
        for setting, budgets, names, found in jobs(file, quick, curve):
            t0 = time.perf_counter()
            for case, score in found:
                for budget in budgets:  # budgets inner: BM25's scores of one text are cached
                    for method in [m for m in names if m in methods]:
                        kept = score(kept_spans(method, case, budget))
                        rows.append(
                            {"file": file, "doc": case.doc, "question": case.question, "setting": setting,
                             "budget": budget, "method": method, "kept": kept}
                        )  # fmt: skip
            took, at = time.perf_counter() - t0, ",".join(map(str, budgets))
            print(f"{file} {setting}@{at}: {took:.0f} s", file=sys.stderr, flush=True)
    return rows


def jobs(file: str, quick: bool, curve: bool) -> Iterator[tuple[str, tuple[int, ...], list[str], list]]:
    """(setting, budgets, methods, [(case, its scorer)]) for every run of one file."""
    if file in real_sets.FILES:
        setting, budgets = real_sets.SETTINGS[file]
        found = [(c, functools.partial(real_sets.score, c)) for c in real_sets.cases(file, quick=quick)]
        yield setting, budgets, [m for m in METHODS if m != LITELLM], found
        return
    data = load(file)
    docs = range(len(data))[:QUICK_DOCS] if quick else range(len(data))
    runs = [(setting, budget, METHODS) for setting, budget in SETTINGS.items()]
    if curve:
        runs += [("single", b, CURVE_METHODS) for b in CURVE_BUDGETS if b != SETTINGS["single"]]
    for setting, budget, names in runs:
        found = [(c, functools.partial(evidence_kept, c.answers)) for c in cases(file, data, setting, docs)]
        yield setting, (budget,), names, found


def settings_of(file: str) -> list[tuple[str, int]]:
    """The (setting, budget) cells a file is measured in (the curve's extra budgets are not cells)."""
    if file in real_sets.SETTINGS:
        setting, budgets = real_sets.SETTINGS[file]
        return [(setting, b) for b in budgets]
    return list(SETTINGS.items())


def means(rows: list[dict]) -> dict[tuple[str, str, int, str], float]:
    """(file, setting, budget, method) -> evidence recall (mean score)."""
    groups: dict[tuple[str, str, int, str], list[float]] = {}
    for r in rows:
        groups.setdefault((r["file"], r["setting"], r["budget"], r["method"]), []).append(float(r["kept"]))
    return {k: mean(v) for k, v in groups.items()}


def markdown(rows: list[dict], methods: list[str]) -> str:
    cells = means(rows)
    files = list(dict.fromkeys(r["file"] for r in rows))
    count: dict[tuple[str, str, int], int] = {}
    for r in rows:
        key = (r["file"], r["setting"], r["budget"])
        count[key] = count.get(key, 0) + (r["method"] == methods[0])
    lines = [
        "| file | setting | budget | n | " + " | ".join(methods) + " |",
        "|" + "---|" * (len(methods) + 4),
    ]
    for file in files:
        for setting, budget in settings_of(file):
            vals = " | ".join(f"{cells.get((file, setting, budget, m), float('nan')):.2f}" for m in methods)
            n = count.get((file, setting, budget), 0)
            lines.append(f"| {file} | {setting} | {budget} | {n} | {vals} |")
    for label, group in (("documents", [f for f in files if f in FILES]),
                         ("chats and multi-hop", [f for f in files if f in real_sets.FILES
                                                  and f not in real_sets.FORMS])):  # fmt: skip
        if group:
            overall = [mean(cells.get((f, s, b, m), float("nan")) for f in group for s, b in settings_of(f))
                       for m in methods]
            lines.append(f"| **mean, {label}** | | | | " + " | ".join(f"**{v:.2f}**" for v in overall) + " |")
    return "\n".join(lines + _curve_table(cells, files))


def _curve_table(cells: dict, files: list[str]) -> list[str]:
    budgets = sorted({b for f, s, b, _ in cells if s == "single"})
    if len(budgets) < 2:
        return []
    lines = ["", "Single documents, recall against budget:", ""]
    lines += ["| file | method | " + " | ".join(map(str, budgets)) + " |", "|" + "---|" * (len(budgets) + 2)]
    for file in [f for f in files if f in FILES]:
        for m in CURVE_METHODS:
            vals = " | ".join(f"{cells.get((file, 'single', b, m), float('nan')):.2f}" for b in budgets)
            lines.append(f"| {file} | {m} | {vals} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    quick = f"first {QUICK_DOCS} L-Eval documents per file, every {real_sets.QUICK_STRIDE}th other question"
    ap.add_argument("--quick", action="store_true", help=quick + ", no curve")
    every = [*FILES, *real_sets.FILES]
    default = ",".join(f for f in every if f not in real_sets.FORMS)
    ap.add_argument("--files", default=default, help="comma list of: " + ", ".join(every))
    ap.add_argument("--methods", default=",".join(METHODS), help="comma list of: " + ", ".join(METHODS))
    ap.add_argument("--no-curve", action="store_true", help="skip the recall-against-budget runs")
    ap.add_argument("--out", type=Path, default=OUT, help="output folder for real_docs.{json,png}")
    ap.add_argument("--publish", action="store_true", help="also copy the PNGs to bench/plots/")
    args = ap.parse_args(argv)
    files = [f for f in args.files.split(",") if f]
    methods = [m for m in METHODS if m in args.methods.split(",")]
    t0, version = time.perf_counter(), library_version()  # taken first: the library may change mid-run
    rows = run(files, methods, args.quick, curve=not (args.quick or args.no_curve))
    print(markdown(rows, methods))
    print(f"\n({len(rows)} compressions in {time.perf_counter() - t0:.0f} s; library {version})")
    cells = means(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {
        "library": version,
        "quick": args.quick,
        "rows": rows,
        "cells": [
            {"file": f, "setting": s, "budget": b, "method": m, "recall": v}
            for (f, s, b, m), v in cells.items()
        ],
    }
    (args.out / "real_docs.json").write_text(json.dumps(summary, indent=1))
    groups = [(f, s, b) for f in files for s, b in settings_of(f)]
    real_docs_plot(cells, groups, methods, args.out / "real_docs.png")
    names = ["real_docs.png"]
    if any(s == "single" and b != SETTINGS["single"] for _, s, b, _ in cells):
        documents = [f for f in files if f in FILES]
        budget_curve_plot(cells, documents, CURVE_METHODS, args.out / "real_docs_budget.png")
        names.append("real_docs_budget.png")
    if args.publish:
        PLOTS.mkdir(exist_ok=True)
        for name in names:
            shutil.copy(args.out / name, PLOTS / name)


if __name__ == "__main__":
    main()
