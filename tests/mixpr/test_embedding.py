import re

import numpy as np
import scipy.sparse as sp

from mixpr.embedding import count_matrix, counts_and_words, embed

from .filler import sentences

TEXTS = sentences(300, seed=3) + [
    "",
    "a b c",
    "Café CAFÉ café naïve",
    "x\x00y zz\x00ww",
    "Season 2 , episode 4 (2017)",
]


def test_matches_scikit_learn_tfidf_vectorizer():
    from sklearn.feature_extraction.text import TfidfVectorizer
    ours = embed(TEXTS)
    # scikit-learn's default pattern, plus lone digits (``mixpr.words``).
    reference = TfidfVectorizer(dtype=np.float32, token_pattern=r"(?u)\b\w\w+\b|\d").fit_transform(TEXTS)
    assert ours.shape == reference.shape
    # Column order differs (first appearance vs alphabetical); similarities do not.
    np.testing.assert_allclose((ours @ ours.T).toarray(), (reference @ reference.T).toarray(), atol=1e-5)


def test_rows_are_unit_length_or_empty():
    norms = np.sqrt(np.asarray(embed(TEXTS).multiply(embed(TEXTS)).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms[:300], 1.0, rtol=1e-5)
    assert norms[300] == 0 and norms[301] == 0  # no token of two or more word characters


def test_counts_are_case_folded_and_per_text():
    counts = count_matrix(["Apple apple APPLE pear", "pear"])
    assert sp.issparse(counts)
    assert sorted(counts.toarray()[0].tolist()) == [1.0, 3.0]
    assert counts.toarray()[1].sum() == 1.0


def test_a_lone_digit_is_a_word_a_lone_letter_is_not():
    # "season 2" and "season 7" must differ, or a question about episode 4 of season 7 matches
    # every season's table alike.
    counts, words = counts_and_words(["Season 2 , episode 4", "season 7 a"])
    assert words == ["season", "2", "episode", "4", "7"]
    assert counts.toarray().tolist() == [[1, 1, 1, 1, 0], [1, 0, 0, 0, 1]]


def test_separator_characters_inside_texts_do_not_shift_rows():
    counts = count_matrix(["aa\x00bb", "cc"])
    assert counts.shape == (2, 3)
    assert counts.toarray()[1].sum() == 1.0


def test_no_words_at_all():
    assert embed(["", "!", "a"]).shape == (3, 0)


def test_bm25_matches_the_bm25s_library():
    import bm25s

    from mixpr.embedding import bm25, count_matrix

    texts = [*sentences(60, seed=4), "the river the river the river bank", "a stone", "river stones under it"]
    query = ["river", "stone"]
    retriever = bm25s.BM25()  # defaults: k1 = 1.5, b = 0.75, Lucene idf
    retriever.index(bm25s.tokenize(texts, stopwords=[], show_progress=False), show_progress=False)
    expected = retriever.get_scores(query)
    counts = count_matrix(texts)
    columns = list(dict.fromkeys(re.findall(r"\w\w+", " ".join(texts).lower())))  # first appearance
    q = np.zeros(counts.shape[1])
    q[[columns.index(w) for w in query]] = 1.0
    np.testing.assert_allclose(bm25(counts) @ q, expected, rtol=1e-5)


def test_bm25_saturates_repeats_and_discounts_length_only_in_part():
    from mixpr.embedding import bm25, count_matrix

    W = bm25(count_matrix(["stone", "stone stone stone stone", "stone " + "filler " * 20, "other"]))
    once, repeated, long = W[:3, 0].toarray().ravel()
    assert once < repeated < 2.5 * once  # four times the word: well under four times the weight
    assert 0 < long < once


def test_unit_rows_keep_directions_and_empty_rows():
    from mixpr.embedding import bm25, count_matrix, unit_rows

    W = bm25(count_matrix(["river stone river", "", "stone bridge"]))
    U = unit_rows(W)
    norms = np.sqrt(np.asarray(U.multiply(U).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, [1, 0, 1], atol=1e-6)
    assert U.dtype == np.float32 and (U[0].indices == W[0].indices).all()
