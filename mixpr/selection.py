"""Scores -> the chunks to keep, in original order, always including the query chunk(s)."""

from __future__ import annotations

import numpy as np


def top_k(scores: np.ndarray, k: int, pinned: np.ndarray) -> np.ndarray:
    """The k best-scoring chunks besides the pinned ones, plus the pinned ones, as sorted indices."""
    free = np.setdiff1d(np.arange(len(scores)), pinned)
    k = min(k, len(free))
    best = free[np.argpartition(-scores[free], k - 1)[:k]] if k > 0 else free[:0]
    return np.union1d(best, pinned)


def within_budget(scores: np.ndarray, sizes: np.ndarray, budget: float, pinned: np.ndarray) -> np.ndarray:
    """Best-first chunks whose estimated sizes fit ``budget`` beside the pinned ones; sorted indices."""
    free = np.ones(len(scores), dtype=bool)
    free[pinned] = False
    room = budget - sizes[pinned].sum()
    candidates = np.flatnonzero(free)
    # Stable sort: among equal scores the earlier chunk wins.
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    taken = np.searchsorted(np.cumsum(sizes[order]), room, side="right")
    return np.union1d(order[:taken], pinned)
