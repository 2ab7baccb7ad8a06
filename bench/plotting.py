"""PNG plots for the quality and speed benches (matplotlib, headless)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from bench.cli import format_size

_STYLES = [
    {"marker": "o", "lw": 3.5, "ms": 8, "alpha": 0.6},
    {"marker": "s", "lw": 1.5, "ls": "--", "ms": 5},
    {"marker": "^", "lw": 1.5, "ls": ":", "ms": 6},
    {"marker": "x", "lw": 1.2, "ls": "-.", "ms": 6},
]


@cache
def _pyplot():
    """matplotlib.pyplot, headless, imported by the first plot: the benches and their tests import this
    module, and most of them draw nothing."""
    import matplotlib

    matplotlib.use("Agg")  # the backend is chosen before pyplot is imported
    import matplotlib.pyplot as plt

    return plt


def quality_plot(family_means: dict, methods: list[str], path: Path) -> None:
    """One panel per family: mean score vs context length, one line per method."""
    families = sorted({fam for fam, _, _ in family_means}, key=["single", "multi", "global"].index)
    fig, axes = _pyplot().subplots(1, len(families), figsize=(5 * len(families), 4), squeeze=False)
    for ax, fam in zip(axes[0], families, strict=True):
        lengths = sorted({n for f, n, _ in family_means if f == fam})
        for i, method in enumerate(methods):
            ys = [family_means.get((fam, n, method)) for n in lengths]
            # Distinct styles: methods often tie, and identical lines would hide each other.
            ax.plot(lengths, ys, label=method, **_STYLES[i % len(_STYLES)])
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [format_size(n) for n in lengths])
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{fam} ({'top-word overlap' if fam == 'global' else 'needle recall'})")
        ax.set_xlabel("context tokens")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("mean score (budget 4000 tokens)")
    axes[0][-1].legend(loc="lower left", fontsize=8)
    _save(fig, path)


def speed_plot(rows: list[dict], path: Path) -> None:
    """Log-log seconds vs tokens: total, each stage, and plain tiktoken counting of the same text."""
    rows = sorted(rows, key=lambda r: r["tokens"])
    xs = [r["tokens"] for r in rows]
    fig, ax = _pyplot().subplots(figsize=(7, 4.5))
    ax.plot(xs, [r["total_ms"] / 1000 for r in rows], marker="o", lw=2, label="compress total")
    for stage in ("chunk", "count", "embed", "rank", "select"):
        ys = [r["stages_ms"].get(stage) for r in rows]
        if any(y for y in ys):
            ax.plot(xs, [(y or 0) / 1000 for y in ys], marker=".", lw=1, alpha=0.7, label=stage)
    ax.plot(xs, [r["count_ms"] / 1000 for r in rows], "k--", marker="s", label="tiktoken count")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens (cl100k)")
    ax.set_ylabel("seconds")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    _save(fig, path)


def real_docs_plot(cells: dict, groups: list[tuple[str, str, int]], methods: list[str], path: Path) -> None:
    """Grouped bars: evidence recall per (file, setting, budget), one bar per method."""
    fig, ax = _pyplot().subplots(figsize=(max(6, 1.6 * len(groups)), 4))
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        ys = [cells.get((f, s, b, method), 0.0) for f, s, b in groups]
        xs = [g + (i - (len(methods) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, ys, width, label=method)
    ax.set_xticks(range(len(groups)), [f"{f}\n{s}@{b}" for f, s, b in groups])
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("evidence recall")
    ax.set_title("Real documents, chats and multi-hop (dev split): evidence kept by compression")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, loc="upper right")
    _save(fig, path)


def budget_curve_plot(cells: dict, files: list[str], methods: list[str], path: Path) -> None:
    """Evidence recall on single documents against the token budget, one panel per file."""
    fig, axes = _pyplot().subplots(1, len(files), figsize=(4.5 * len(files), 4), squeeze=False)
    for ax, file in zip(axes[0], files, strict=True):
        budgets = sorted({b for f, s, b, _ in cells if f == file and s == "single"})
        for i, method in enumerate(methods):
            ax.plot(budgets, [cells.get((file, "single", b, method)) for b in budgets], label=method,
                    **_STYLES[i % len(_STYLES)])  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [format_size(b) if b % 256 == 0 else str(b) for b in budgets])
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{file} (single document)")
        ax.set_xlabel("budget (tokens)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("evidence recall")
    axes[0][-1].legend(loc="lower right", fontsize=8)
    _save(fig, path)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
