"""The question's words, and each chunk's BM25 relevance to them (the local expert's second list).

Which words: those of the query's chunks, except words found in more than
``experts.STOP_WORD_SHARE`` of the chunks. A question's "the", "of this contract" or
"reviewed by a lawyer" match every chunk a little, and summed over a long question they
outweigh its one rare word.

Variants: a real question rarely uses the document's exact word form ("three pointers" for
"3 - point field goals", "handmaids" for "handmaid", "collected" for "collection"). A query
word of at least ``PREFIX_CHARS`` characters also matches the (rare) words that share its first
``PREFIX_CHARS`` characters, at ``VARIANT_WEIGHT``: truncation stemming, which McNamee and
Mayfield (2004) found as good as a language's stemmer, needs no word lists and costs one pass
over the vocabulary. Measured on the real-document dev split (bench/README.md): prefixes of
4 / 5 / 6 characters, mean of the six cells 0.716 / 0.718 / 0.704 against 0.708 without;
truncating every word of the index instead (so the graph also sees stems) did worse (0.697).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from mixpr.experts import STOP_WORD_SHARE, rare_words

PREFIX_CHARS = 5
VARIANT_WEIGHT = 0.5  # a variant is weaker evidence than the word itself (1.0 measured 0.006 lower)


def lexical_scores(W: sp.csr_matrix, p: np.ndarray, words: Sequence[str] | None = None) -> np.ndarray:
    """BM25 relevance of each chunk (rows of ``W``, see ``embedding.bm25``) to the query's words.

    ``words``: the columns' words (``embedding.counts_and_words``); without them no variants."""
    return np.asarray(W @ query_vector(W, p, words)).ravel()


def query_vector(W: sp.csr_matrix, p: np.ndarray, words: Sequence[str] | None = None) -> np.ndarray:
    """Weight per column: 1 for the query's rare words, ``VARIANT_WEIGHT`` for their variants."""
    rare = rare_words(W, share=STOP_WORD_SHARE)
    asked = np.intersect1d(W[np.flatnonzero(p)].indices, rare)
    query = np.zeros(W.shape[1])
    if words is not None and len(asked):
        query[variants(words, asked, rare)] = VARIANT_WEIGHT
    query[asked] = 1.0
    return query


def variants(words: Sequence[str], asked: np.ndarray, rare: np.ndarray) -> np.ndarray:
    """The rare columns whose word starts like one of the asked words (those included)."""
    prefixes = {words[i][:PREFIX_CHARS] for i in asked.tolist() if len(words[i]) >= PREFIX_CHARS}
    if not prefixes:
        return np.zeros(0, dtype=np.int64)
    # A fixed-width array keeps each word's first PREFIX_CHARS characters: one vectorised lookup.
    heads = np.array([words[i] for i in rare.tolist()], dtype=f"<U{PREFIX_CHARS}")
    return rare[np.isin(heads, list(prefixes))]
