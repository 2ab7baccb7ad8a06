import numpy as np

from mixpr.selection import top_k, within_budget


def test_top_k_returns_best_in_original_order_plus_pinned():
    scores = np.array([0.1, 0.9, 0.3, 0.8, 0.0])
    assert top_k(scores, 2, np.array([1])).tolist() == [1, 2, 3]


def test_budget_takes_best_first_until_full():
    scores = np.array([0.5, 0.9, 0.1, 0.8, 0.0])
    sizes = np.array([10.0, 10, 10, 10, 5])
    # 5 for the pinned query leaves room for two 10-token chunks: the two best.
    assert within_budget(scores, sizes, 25, np.array([4])).tolist() == [1, 3, 4]


def test_budget_smaller_than_the_query_keeps_only_the_query():
    assert within_budget(np.ones(3), np.array([10.0, 10, 50]), 20, np.array([2])).tolist() == [2]
