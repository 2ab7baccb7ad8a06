import numpy as np

from mixpr.structure import arrange, spread, whole_sentences


def test_pieces_of_one_sentence_share_its_best_score():
    opens = np.array([True, False, False, True, True, False])
    scores = np.array([0.1, 0.9, 0.2, 0.5, 0.0, 0.3])
    assert whole_sentences(scores, opens).tolist() == [0.9, 0.9, 0.9, 0.5, 0.3, 0.3]


def test_a_sentence_of_too_many_pieces_stays_in_pieces():
    opens = np.array([True] + [False] * 9)
    scores = np.arange(10.0)
    assert whole_sentences(scores, opens, max_chunks=8).tolist() == scores.tolist()
    assert whole_sentences(scores, opens, max_chunks=10).tolist() == [9.0] * 10


def test_neighbours_of_a_strong_match_outrank_a_weak_match_elsewhere():
    scores = np.zeros(30)
    scores[5], scores[20] = 1.0, 0.1
    out = spread(scores)
    assert out[5] > out[4] > out[3] > out[20] > out[19]
    assert np.isclose(out[4], out[6], rtol=1e-2)
    assert out[4] > out[20]


def test_the_pinned_query_spreads_nothing():
    scores = np.zeros(10)
    scores[9], scores[2] = 5.0, 1.0  # the query chunk (last) is the best match of all
    out = arrange(scores, np.ones(10, dtype=bool), pinned=np.array([9]))
    assert out[8] < out[1]
