"""Personalised PageRank on the chunk graph A = column-normalise(E Eᵀ), never materialised.

E has one L2-normalised TF-IDF row per chunk, so M = E Eᵀ is the cosine
similarity of every pair of chunks. M is dense in practice (common words link
everything), so instead of building it we use the factorisation

    A x = M D⁻¹ x = E (Eᵀ (x / d)),   d = M 1 = E (Eᵀ 1)

which costs two sparse mat-vecs, O(nnz(E)), per iteration: linear in the text.

With α = 0 (plain PageRank) the power iteration needs a start vector, and on
this graph the answer is known in closed form: M is symmetric, so A d = M 1 = d,
i.e. the degree vector is the stationary distribution. We start from it, which
makes α = 0 exact on disconnected graphs too (where a uniform start would keep
every component's mass uniform and rank nothing).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

MAX_ITER = 18
TOL = 1.0e-6


def degrees(E: sp.csr_matrix) -> np.ndarray:
    """Column sums of M = E Eᵀ: how strongly each chunk is tied to all others."""
    return np.asarray(E @ np.asarray(E.sum(axis=0)).ravel(), dtype=np.float64).ravel()


def personalised_pagerank(
    E: sp.csr_matrix, p: np.ndarray, alpha: float, *, max_iter: int = MAX_ITER, tol: float = TOL
) -> np.ndarray:
    """π = (1−α) A π + α p, iterated at most ``max_iter`` times (networkx's tolerance rule).

    Chunks without any word (``d == 0``) are dangling: their mass restarts at p,
    as in networkx's default.
    """
    n = E.shape[0]
    if n == 0:
        return np.zeros(0)
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    d = degrees(E)
    dangling = d == 0
    inv_d = np.divide(1.0, d, out=np.zeros_like(d), where=~dangling)
    x = d / d.sum() if alpha == 0 and d.sum() > 0 else p.copy()
    Et = E.T.tocsr()
    for _ in range(max_iter):
        walked = E @ (Et @ (x * inv_d)) + x[dangling].sum() * p
        new = (1.0 - alpha) * walked + alpha * p
        converged = np.abs(new - x).sum() < n * tol
        x = new
        if converged:
            break
    return x
