"""Chunks -> sparse word counts, weighted as TF-IDF rows (scikit-learn's weighting) or BM25 rows.

We count words ourselves and hand the count matrix to scikit-learn's
``TfidfTransformer``. ``TfidfVectorizer`` runs its Python analyzer and a
Counter once per chunk (0.40 s on 1M tokens here); one ``findall`` over the chunks
joined and a dict lookup per word took 0.25 s; ``mixpr.words`` reads the same words
(scikit-learn's token pattern plus lone digits) with numpy in a third of that.
``tests/mixpr/test_embedding.py`` pins the equality with ``TfidfVectorizer``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mixpr.words import find_words

# scikit-learn is imported where it is used: its import takes 1-2 s (it loads SciPy's stats), and a
# gateway whose pool's workers run MixPR imports this module but never weighs a word itself (issue 59).

# Words are scikit-learn's default token pattern (2+ word characters) plus lone digits
# (``mixpr.words``). Lone digits matter to real questions ("season 2", "episode 4", "3 pointers"):
# on the real-document dev split they lift Natural Questions at 4,000 tokens from 0.85 to 0.88.

# BM25's usual constants (Robertson et al.; bm25s and Lucene defaults).
BM25_K1 = 1.5
BM25_B = 0.75


def count_matrix(texts: list[str]) -> sp.csr_matrix:
    """Term counts, one row per text, columns in order of first appearance."""
    return counts_and_words(texts)[0]


def counts_and_words(texts: list[str]) -> tuple[sp.csr_matrix, list[str]]:
    """``count_matrix`` and its columns' words (lower-cased), in column order."""
    found = find_words(texts)
    indptr = np.concatenate(([0], np.cumsum(np.bincount(found.rows, minlength=len(texts)))))
    data = np.ones(len(found.ids), dtype=np.float32)
    counts = sp.csr_matrix((data, found.ids, indptr), shape=(len(texts), len(found.vocabulary)))
    counts.sum_duplicates()
    return counts, found.vocabulary


def embed(texts: list[str]) -> sp.csr_matrix:
    """TF-IDF rows (n_texts x vocabulary), float32, each non-empty row of unit L2 norm."""
    return tfidf(count_matrix(texts))


def tfidf(counts: sp.csr_matrix) -> sp.csr_matrix:
    """``embed`` from a count matrix already made."""
    if counts.shape[1] == 0:
        return counts
    from sklearn.feature_extraction.text import TfidfTransformer

    return TfidfTransformer(norm="l2", smooth_idf=True).fit_transform(counts).astype(np.float32)


def bm25(counts: sp.csr_matrix, *, k1: float = BM25_K1, b: float = BM25_B) -> sp.csr_matrix:
    """BM25 term weights: w(t, c) = idf(t) * tf / (tf + k1 (1 - b + b |c| / avg |c|)).

    Unlike TF-IDF's L2 norm, a repeated word saturates (k1) and a long chunk is discounted
    only in part (b), so a chunk that repeats a query word, or holds a long clause with the
    query word once, is not pushed down. A query's relevance to each chunk is ``W @ q`` for
    a 0/1 vector ``q`` of its words. Lucene's variant (idf = ln(1 + (n − df + ½)/(df + ½)),
    no constant (k1 + 1) factor), as the bm25s library computes it by default.
    """
    counts = counts.tocsr().astype(np.float64)
    n_rows = counts.shape[0]
    df = document_frequency(counts)
    idf = np.log1p((n_rows - df + 0.5) / (df + 0.5))
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    norm = k1 * (1 - b + b * lengths / max(lengths.mean(), 1e-9))
    tf = counts.data
    row_norm = np.repeat(norm, np.diff(counts.indptr))
    data = idf[counts.indices] * tf / (tf + row_norm)
    return sp.csr_matrix((data, counts.indices, counts.indptr), shape=counts.shape)


def document_frequency(M: sp.csr_matrix) -> np.ndarray:
    """How many rows (chunks) hold each column (word)."""
    return np.bincount(M.indices, minlength=M.shape[1])


def unit_rows(W: sp.csr_matrix) -> sp.csr_matrix:
    """``W``'s rows scaled to unit L2 norm, float32: cosines of BM25 rows for the local graph."""
    if W.shape[1] == 0:  # a text with no word (one-letter tokens only): nothing to scale
        return W.astype(np.float32)
    from sklearn.preprocessing import normalize

    return normalize(W, norm="l2").astype(np.float32)
