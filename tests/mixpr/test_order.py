import numpy as np

from mixpr.order import EARLY, LATE, direction, position_scores


def test_direction_reads_ordinals():
    assert direction("What is the second topic we discussed?") == EARLY
    assert direction("When did we last talk about it?") == LATE
    assert direction("What did Carol bake?") == 0


def test_only_good_matches_are_ordered_by_position():
    scores = position_scores(np.array([0.1, 2.0, 0.0, 1.5, 2.0]), EARLY)
    assert scores[0] == 0 and scores[2] == 0  # weak or no match
    assert scores[1] > scores[3] > scores[4] > 0
