import numpy as np

from mixpr import bridge
from mixpr.chunking import chunk_text
from mixpr.embedding import bm25
from mixpr.engine import _counts, compress
from mixpr.lexical import query_vector
from mixpr.query import query_weights

TEAMS = ["Elm", "Oak", "Ash", "Fir", "Yew", "Bay", "Ivy", "Rye", "Cob", "Dun", "Fen", "Hay"]
QUESTION = "Tom Watkins played college football for a team that plays their home games at what stadium?"


def _haystack() -> str:
    """HotpotQA's shape: the answer shares with the question only words every team's paragraph has;
    only the first hop's bridge entity ("Iowa State") leads to it, through its paragraph's title."""
    teams = [f"{t} Valley Rams\nThe Rams play their home games at {t} Field stadium." for t in TEAMS]
    first_hop = "Tom Watkins\nTom Watkins is a former running back. He played college football at Iowa State."
    second_hop = "Iowa State Cyclones\nThe Cyclones play their home games at Jack Trice Stadium."
    return "\n\n".join(teams[:4] + [first_hop] + teams[4:9] + [second_hop] + teams[9:]) + "\n\n" + QUESTION


def test_the_first_hops_bridge_entity_brings_in_the_article_it_names():
    kept = compress(_haystack(), top_k=3, route="local")
    assert "He played college football at Iowa State." in kept.text
    assert "Jack Trice Stadium" in kept.text


def test_without_the_bridge_the_second_hop_ties_with_every_team(monkeypatch):
    monkeypatch.setattr(bridge, "WEIGHT", 0.0)
    assert "Jack Trice Stadium" not in compress(_haystack(), top_k=3, route="local").text


def test_only_another_article_whose_title_names_an_added_word_scores():
    chunks = chunk_text(_haystack())
    counts, words, (found, heads) = _counts(chunks)
    first_round = np.zeros(len(chunks))
    first_round[[i for i, t in enumerate(chunks.texts()) if "Iowa State." in t]] = 1.0
    W, p = bm25(counts), query_weights(chunks)
    bridged = bridge.bridge_scores(W, heads, found.under, first_round, p, query_vector(W, p, words))
    # Not the seed's own article, not the teams (their titles share no word the seed adds).
    assert {found.texts[found.under[i]] for i in np.flatnonzero(bridged)} == {"Iowa State Cyclones"}
