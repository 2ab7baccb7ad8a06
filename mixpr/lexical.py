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

Topic words: several documents pasted at once are one text, and the largest one's name ("harry
potter" in a 37k-token article among five pages of 64k) is in more than ``STOP_WORD_SHARE`` of its
chunks: a stop word by that count, so a question about it ("when did all the first harry potter book
come out") ranked "first", "book" and "out" over every page. A frequent word that some stretches of
the text (``TOPIC_ABSENT`` of its tenths) all but lack is what sets one document apart, not a word
every part uses ("contract", "the"): it counts. Within one document it is a section's own word.
Measured (bench/README.md, issue 45): whole-paste retrieval over the dev conversations' pages, 72 ->
76 of 96 answers at 2k, 84 -> 86 at 4k, 88 -> 91 at 8k; contracts unchanged; ``bench.real_docs`` cells
unchanged but NQ single (0.69 -> 0.67, two questions lost and one gained on one page).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from mixpr.experts import STOP_WORD_SHARE, rare_words

PREFIX_CHARS = 5
VARIANT_WEIGHT = 0.5  # a variant is weaker evidence than the word itself (1.0 measured 0.006 lower)
# A frequent query word near-absent from this share of the text's tenths is a topic word (issue 45).
SEGMENTS = 10
NEAR_ABSENT = 0.1
TOPIC_ABSENT = 0.3


def lexical_scores(W: sp.csr_matrix, p: np.ndarray, words: Sequence[str] | None = None) -> np.ndarray:
    """BM25 relevance of each chunk (rows of ``W``, see ``embedding.bm25``) to the query's words.

    ``words``: the columns' words (``embedding.counts_and_words``); without them no variants."""
    return np.asarray(W @ query_vector(W, p, words)).ravel()


def query_vector(W: sp.csr_matrix, p: np.ndarray, words: Sequence[str] | None = None) -> np.ndarray:
    """Weight per column: 1 for the query's rare words and topic words (``topic_words``),
    ``VARIANT_WEIGHT`` for the rare words' variants."""
    rare = rare_words(W, share=STOP_WORD_SHARE)
    question = np.flatnonzero(p)
    words_asked = np.unique(W[question].indices)
    asked = np.intersect1d(words_asked, rare)
    query = np.zeros(W.shape[1])
    if words is not None and len(asked):
        query[variants(words, asked, rare)] = VARIANT_WEIGHT
    query[asked] = 1.0
    query[topic_words(W, np.setdiff1d(words_asked, rare), question)] = 1.0
    return query


def topic_words(W: sp.csr_matrix, frequent: np.ndarray, question: np.ndarray) -> np.ndarray:
    """Of the query's ``frequent`` words (columns), those near-absent (under ``NEAR_ABSENT`` of their
    mean count) from at least ``TOPIC_ABSENT`` of the text's ``SEGMENTS`` (the ``question``'s own
    chunks left out): a name one of several pasted documents repeats, not a word every part uses.
    One pass over the query words' entries."""
    text = np.ones(W.shape[0], dtype=bool)
    text[question] = False
    rows = int(text.sum())
    if not len(frequent) or rows < SEGMENTS:
        return frequent[:0]
    columns = W[text][:, frequent].tocsc()
    kept = []
    for k, column in enumerate(frequent.tolist()):
        at = columns.indices[columns.indptr[k] : columns.indptr[k + 1]]
        counts = np.bincount(at * SEGMENTS // rows, minlength=SEGMENTS)
        if np.count_nonzero(counts < NEAR_ABSENT * counts.mean()) >= TOPIC_ABSENT * SEGMENTS:
            kept.append(column)
    return np.array(kept, dtype=np.int64)


def variants(words: Sequence[str], asked: np.ndarray, rare: np.ndarray) -> np.ndarray:
    """The rare columns whose word starts like one of the asked words (those included)."""
    prefixes = {words[i][:PREFIX_CHARS] for i in asked.tolist() if len(words[i]) >= PREFIX_CHARS}
    if not prefixes:
        return np.zeros(0, dtype=np.int64)
    # A fixed-width array keeps each word's first PREFIX_CHARS characters: one vectorised lookup.
    heads = np.array([words[i] for i in rare.tolist()], dtype=f"<U{PREFIX_CHARS}")
    return rare[np.isin(heads, list(prefixes))]
