"""Personalised PageRank on a chunk graph: π = (1−α) A π + α p, A = column-normalise(M).

Two ways to hold M, one power iteration:

- ``factorised``: M = E Eᵀ is the cosine similarity of every pair of chunks and
  is dense in practice, so we never build it. With d = M 1 = E (Eᵀ 1),
  A x = E (Eᵀ (x / d)) costs two sparse mat-vecs, O(nnz(E)): linear in the text.
- ``pruned``: M built explicitly with entries below a threshold removed (the
  paper prunes at 0.27; we use 0.2 because our explicit graph leaves out stop
  words, which lowers every similarity a little, see ``experts``; 0.27 lost
  one-word links such as "Where is Mary?" -> "Mary went to the office.").
  Quadratic in the rows, so only for a few thousand.

With α = 0 (plain PageRank) the iteration needs a start vector. M is symmetric,
so A d = M 1 = d: the degree vector is the stationary distribution. We start
from it, which makes α = 0 exact even on disconnected graphs (a uniform start
would keep every component's mass uniform and rank nothing inside it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

MAX_ITER = 18
# An absolute L1 tolerance, not networkx's N·tol: on a 100k-chunk text N·1e-6
# stops the iteration after four or five steps, before the walk has reached the
# far end of a six-hop chain. Mass still arriving after 18 steps at α = 0.6 is
# 0.4^18 ≈ 7e-8, so local ranking runs all 18; α = 0 converges at once.
TOL = 1.0e-9
PRUNE_BELOW = 0.2
# Along a chain mass decays by (1 − α) per step; at α = 0.3, 0.7^30 ≈ 2e-5 is left.
CHAIN_ITER = 30


def degrees(E: sp.csr_matrix) -> np.ndarray:
    """Column sums of M = E Eᵀ: how strongly each chunk is tied to all others."""
    return np.asarray(E @ np.asarray(E.sum(axis=0)).ravel(), dtype=np.float64).ravel()


def factorised(E: sp.csr_matrix, p: np.ndarray, alpha: float, **options) -> np.ndarray:
    """PPR on M = E Eᵀ without building M."""
    d = degrees(E)
    if alpha == 0 and d.sum() > 0:
        return d / d.sum()  # the fixed point itself (see above): no iteration needed
    Et = E.T.tocsr()
    return _iterate(lambda y: E @ (Et @ y), d, p, alpha, **options)


def pruned(
    E: sp.csr_matrix, p: np.ndarray, alpha: float, *, threshold: float = PRUNE_BELOW, **options
) -> np.ndarray:
    """PPR on M = E Eᵀ with similarities below ``threshold`` cut (self-loops stay: e·e = 1)."""
    M = (E @ E.T).tocsr()
    M.data[M.data < threshold] = 0
    M.eliminate_zeros()
    return _iterate(lambda y: M @ y, np.asarray(M.sum(axis=0)).ravel(), p, alpha, **options)


def along_chain(
    p: np.ndarray, alpha: float, *, max_iter: int = CHAIN_ITER, apart: np.ndarray | None = None
) -> np.ndarray:
    """PPR on the path graph of consecutive chunks (i - i+1), personalised by ``p``.

    Each step hands a chunk's mass to its two neighbours, so the result is ``p`` smoothed
    along the text with weights decaying by about (1 − α)/2 per chunk of distance. Two
    shifted additions per step: linear, no matrix. ``apart``: chunks i whose edge to i-1 is cut
    (nothing flows across); a chunk cut off on both sides keeps its mass (a self-loop)."""
    n = len(p)
    if n < 2 or np.sum(p) <= 0:
        return np.asarray(p, dtype=np.float64)
    linked = np.ones(n - 1)
    if apart is not None:
        linked[np.asarray(apart)[np.asarray(apart) > 0] - 1] = 0.0
    d = np.zeros(n)
    d[1:] += linked
    d[:-1] += linked
    alone = (d == 0).astype(np.float64)
    return _iterate(functools.partial(_chain_step, linked, alone), d + alone, p, alpha, max_iter=max_iter)


def _chain_step(linked: np.ndarray, alone: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = y * alone
    out[1:] += y[:-1] * linked
    out[:-1] += y[1:] * linked
    return out


def _iterate(
    multiply: Callable[[np.ndarray], np.ndarray],
    d: np.ndarray,
    p: np.ndarray,
    alpha: float,
    *,
    max_iter: int = MAX_ITER,
    tol: float = TOL,
) -> np.ndarray:
    """Power iteration until the L1 change is below ``tol``; mass on chunks without edges restarts at p."""
    n = len(d)
    if n == 0:
        return np.zeros(0)
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    dangling = d <= 0
    inv_d = np.divide(1.0, d, out=np.zeros(n), where=~dangling)
    x = d / d.sum() if alpha == 0 and d.sum() > 0 else p.copy()
    for _ in range(max_iter):
        walked = np.asarray(multiply(x * inv_d), dtype=np.float64).ravel() + x[dangling].sum() * p
        new = (1.0 - alpha) * walked + alpha * p
        converged = np.abs(new - x).sum() < tol
        x = new
        if converged:
            break
    return x
