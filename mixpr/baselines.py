"""Chunk scorers. MixPR's are personalised PageRank and plain PageRank; the
baselines the benchmarks compare against share the chunks, budget and selection:

- RAG-Sparse: cosine similarity of each chunk's TF-IDF row to the query's.
- middle-out: keep the head and the tail (score = distance from the middle).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def rag_sparse_scores(E: sp.csr_matrix, p: np.ndarray) -> np.ndarray:
    """s = E q, where q is the p-weighted sum of the query chunks' rows."""
    query = sp.csr_matrix(p) @ E
    return np.asarray((E @ query.T).todense()).ravel()


def middle_out_scores(n: int) -> np.ndarray:
    """Higher the farther from the middle, so a budget keeps equal head and tail."""
    return np.abs(np.arange(n) - (n - 1) / 2.0)
