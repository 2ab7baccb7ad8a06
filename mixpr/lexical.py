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

Compounds: a compound is written open, hyphenated or closed ("non-transferable license" asked,
"the nontransferable right" written), and the words split at the hyphen. Two neighbouring words of the
question written as one rare word of the text (``JOINED_CHARS`` characters or more: not "into" or
"anyone") count as asked; neighbours only, so "where ... as" never asks "whereas".
Measured (issue 45, ``python -m bench.paste_ranks``): contracts 69 -> 72 of 108 answers held at 2k,
78 -> 81 at 4k, 85 -> 86 at 8k, pages unchanged (with ``mixpr.quoted`` too: 76, 87, 91, 93 at 2k to
16k; ``bench.real_docs`` contracts single 0.65 -> 0.69 at 1k, haystack 0.68 -> 0.73, no question lost).

Topic words: several documents pasted at once are one text, and the largest one's name ("harry
potter" in a 37k-token article among five pages of 64k) is in more than ``STOP_WORD_SHARE`` of its
chunks: a stop word by that count, so a question about it ("when did all the first harry potter book
come out") ranked "first", "book" and "out" over every page. A frequent word that some stretches of
the text (``TOPIC_ABSENT`` of its tenths) all but lack is what sets one document apart, not a word
every part uses ("contract", "the"): it counts, when it lacks more of them than the text's frequent
words do at the median. A table or a list lacks "the" and "and" as it lacks every common word: they
stay out (without that comparison, single NQ pages of tables lost answers: 0.69 -> 0.67 at 1k,
0.90 -> 0.87 at 4k).
Measured (``python -m bench.paste_ranks``, issue 45): over the dev conversations' whole pastes, pages
72 -> 75 of 96 answers at 2k, 84 -> 86 at 4k, 88 -> 91 at 8k; contracts unchanged; every
``bench.real_docs`` cell and budget the same.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from mixpr.experts import STOP_WORD_SHARE, rare_words

PREFIX_CHARS = 5
_WORDS = re.compile(r"\w\w+|\d")  # the words as ``mixpr.words`` reads them
JOINED_CHARS = 7  # a compound at least this long: not "into", "cannot" nor "anyone"
VARIANT_WEIGHT = 0.5  # a variant is weaker evidence than the word itself (1.0 measured 0.006 lower)
# A frequent query word near-absent from this share of the text's tenths is a topic word (issue 45).
SEGMENTS = 10
NEAR_ABSENT = 0.1
TOPIC_ABSENT = 0.3


def lexical_scores(W: sp.csr_matrix, p: np.ndarray, words: Sequence[str] | None = None,
                   text: str = "") -> np.ndarray:
    """BM25 relevance of each chunk (rows of ``W``, see ``embedding.bm25``) to the query's words.

    ``words``: the columns' words (``embedding.counts_and_words``); without them no variants.
    ``text``: the query's text (its chunks'), whose neighbouring words may be a compound (``joined``)."""
    return np.asarray(W @ query_vector(W, p, words, text)).ravel()


def query_vector(W: sp.csr_matrix, p: np.ndarray, words: Sequence[str] | None = None,
                 text: str = "") -> np.ndarray:
    """Weight per column: 1 for the query's rare words, topic words (``topic_words``) and compounds
    (``joined``), ``VARIANT_WEIGHT`` for the rare words' variants."""
    rare = rare_words(W, share=STOP_WORD_SHARE)
    question = np.flatnonzero(p)
    words_asked = np.unique(W[question].indices)
    asked = np.intersect1d(words_asked, rare)
    query = np.zeros(W.shape[1])
    if words is not None and len(asked):
        query[variants(words, asked, rare)] = VARIANT_WEIGHT
    query[asked] = 1.0
    if words is not None and text:
        query[joined(words, compounds(text), rare)] = 1.0
    query[topic_words(W, np.setdiff1d(words_asked, rare), question)] = 1.0
    return query


def topic_words(W: sp.csr_matrix, frequent: np.ndarray, question: np.ndarray) -> np.ndarray:
    """Of the query's ``frequent`` words (columns), those near-absent (under ``NEAR_ABSENT`` of their
    mean count) from at least ``TOPIC_ABSENT`` of the text's ``SEGMENTS`` more than the text's frequent
    words are at the median (the ``question``'s own chunks left out): a name one of several pasted
    documents repeats, not a word every part uses, nor one a table or a list lacks as it lacks every
    common word. One pass over the frequent words' entries."""
    text = np.ones(W.shape[0], dtype=bool)
    text[question] = False
    rows = int(text.sum())
    if not len(frequent) or rows < SEGMENTS:
        return frequent[:0]
    body = W[text]
    common = np.setdiff1d(np.arange(W.shape[1]), rare_words(body, share=STOP_WORD_SHARE))
    absent = _absent(body[:, common].tocsc(), rows)
    usual = float(np.median(absent)) if len(absent) else 0.0
    mine = dict(zip(common.tolist(), absent.tolist(), strict=True))
    return np.array([c for c in frequent.tolist() if mine.get(c, 0) - usual >= TOPIC_ABSENT * SEGMENTS],
                    dtype=np.int64)


def _absent(columns: sp.csc_matrix, rows: int) -> np.ndarray:
    """Per column, the segments (of ``SEGMENTS``) where its count is under ``NEAR_ABSENT`` of its mean:
    one count of every (column, segment) pair over all the entries at once."""
    column = np.repeat(np.arange(columns.shape[1], dtype=np.int64), np.diff(columns.indptr))
    segment = columns.indices.astype(np.int64) * SEGMENTS // rows
    counts = np.bincount(column * SEGMENTS + segment, minlength=columns.shape[1] * SEGMENTS)
    counts = counts.reshape(-1, SEGMENTS)
    return np.count_nonzero(counts < NEAR_ABSENT * counts.mean(axis=1, keepdims=True), axis=1)


def compounds(text: str) -> set[str]:
    """Each two neighbouring words of ``text`` written as one, when that is ``JOINED_CHARS`` long or
    more ("non-transferable license": "nontransferable", "transferablelicense"): linear in the text."""
    found = _WORDS.findall(text.lower())
    return {a + b for a, b in zip(found, found[1:], strict=False)
            if a != b and len(a) + len(b) >= JOINED_CHARS}


def joined(words: Sequence[str], wanted: set[str], rare: np.ndarray) -> np.ndarray:
    """The rare columns whose word is one of ``wanted`` (``compounds``): a compound is spelled open,
    hyphenated or closed, and the question's spelling need not be the text's. One set lookup a word."""
    if not wanted or not len(rare):
        return np.zeros(0, dtype=np.int64)
    return rare[np.fromiter((words[i] in wanted for i in rare.tolist()), bool, len(rare))]


def variants(words: Sequence[str], asked: np.ndarray, rare: np.ndarray) -> np.ndarray:
    """The rare columns whose word starts like one of the asked words (those included)."""
    prefixes = {words[i][:PREFIX_CHARS] for i in asked.tolist() if len(words[i]) >= PREFIX_CHARS}
    if not prefixes:
        return np.zeros(0, dtype=np.int64)
    # A fixed-width array keeps each word's first PREFIX_CHARS characters: one vectorised lookup.
    heads = np.array([words[i] for i in rare.tolist()], dtype=f"<U{PREFIX_CHARS}")
    return rare[np.isin(heads, list(prefixes))]
