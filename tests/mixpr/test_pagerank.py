import numpy as np
import scipy.sparse as sp

from mixpr.embedding import embed
from mixpr.pagerank import along_chain, degrees, factorised

from .filler import sentences


def test_two_chunk_graph_by_hand():
    # M = [[1, .6], [.6, 1]], d = [1.6, 1.6]; π = .5 A π + .5 [0, 1]  =>  π = [3/14, 11/14].
    E = sp.csr_matrix(np.array([[1.0, 0.0], [0.6, 0.8]]))
    pi = factorised(E, np.array([0.0, 1.0]), 0.5, max_iter=100, tol=1e-12)
    np.testing.assert_allclose(pi, [3 / 14, 11 / 14], atol=1e-9)


def test_matches_networkx_on_the_explicit_graph():
    import networkx as nx
    E = embed(sentences(40, seed=5) + ["gentle harbor question about the river?"])
    M = (E @ E.T).toarray().astype(np.float64)
    graph = nx.from_numpy_array(M, create_using=nx.DiGraph)
    p = np.zeros(E.shape[0])
    p[-1] = 1.0
    # networkx's alpha is the damping factor, 1 - our α.
    expected = nx.pagerank(graph, alpha=0.4, personalization=dict(enumerate(p)), tol=1e-12, max_iter=500)
    ours = factorised(E, p, 0.6, max_iter=200, tol=1e-14)
    np.testing.assert_allclose(ours, [expected[i] for i in range(len(p))], atol=1e-6)


def test_plain_pagerank_ranks_the_big_clique_above_the_small_one():
    # Disconnected cliques, like a word list: a uniform start would leave every node at 1/n.
    E = embed(["apple"] * 30 + ["pear"] * 3 + ["plum"] * 3)
    pi = factorised(E, np.eye(36)[-1], 0.0)
    assert pi[:30].min() > pi[30:].max()
    np.testing.assert_allclose(pi, degrees(E) / degrees(E).sum())


def test_query_neighbours_outrank_strangers():
    texts = sentences(200, seed=1)
    texts[50] = "The lighthouse keeper hid the key under the blue stone."
    texts.append("Where did the lighthouse keeper hide the key?")
    E = embed(texts)
    pi = factorised(E, np.eye(len(texts))[-1], 0.6)
    assert np.argsort(-pi)[1] == 50  # first after the query itself


def test_stops_after_max_iter():
    E = embed(sentences(30, seed=2))
    p = np.eye(30)[-1]
    one = factorised(E, p, 0.6, max_iter=1, tol=0)
    A = (E @ E.T).toarray()
    A = A / A.sum(axis=0)
    np.testing.assert_allclose(one, 0.4 * A @ p + 0.6 * p, atol=1e-6)


def test_chunks_without_words_send_their_mass_back_to_the_query():
    E = embed(["river stone", "!!", "river bridge"])
    pi = factorised(E, np.array([0.0, 0.0, 1.0]), 0.6)
    assert np.isclose(pi.sum(), 1.0)
    assert pi[1] < 1e-12


def test_along_chain_matches_networkx_on_the_path_graph():
    import networkx as nx
    p = np.zeros(12)
    p[[3, 9]] = [0.75, 0.25]
    ours = along_chain(p, 0.3, max_iter=200)
    expected = nx.pagerank(nx.path_graph(12), alpha=0.7, personalization=dict(enumerate(p)), tol=1e-12)
    np.testing.assert_allclose(ours, [expected[i] for i in range(12)], atol=1e-6)
    assert ours[3] > ours[2] > ours[1] > ours[0] and ours[3] > ours[9]


def test_along_chain_of_nothing_is_nothing():
    assert along_chain(np.zeros(4), 0.3).tolist() == [0, 0, 0, 0]
    assert along_chain(np.array([2.0]), 0.3).tolist() == [2.0]


def test_nothing_flows_along_the_chain_across_a_cut():
    p = np.zeros(8)
    p[2], p[5] = 1.0, 1.0
    out = along_chain(p, 0.3, apart=np.array([4]))  # the edge 3-4 is cut
    assert np.isclose(out[:4].sum(), 0.5) and np.isclose(out[4:].sum(), 0.5)
    lone = along_chain(p, 0.3, apart=np.array([5, 6]))  # chunk 5 is cut off on both sides
    assert np.isclose(lone[5], 0.5) and np.isclose(lone[:5].sum(), 0.5)  # it keeps all its own mass
    np.testing.assert_allclose(along_chain(p, 0.3, apart=np.array([], dtype=int)), along_chain(p, 0.3))
