import numpy as np

from mixpr.chunking import chunk_text
from mixpr.embedding import embed
from mixpr.experts import global_scores, local_scores, without_frequent_words
from mixpr.selection import query_weights

from .filler import haystack


def ranks(text, scorer, **kwargs):
    chunks = chunk_text(text)
    texts = chunks.texts()
    scores = scorer(embed(texts), query_weights(chunks.words), **kwargs)
    order = np.argsort(-scores, kind="stable")
    return {texts[i].strip(): rank for rank, i in enumerate(order)}


def test_frequent_words_are_dropped_from_the_walk_but_rare_ones_kept():
    E = embed(["the river"] * 50 + ["the stone"] * 3)
    assert without_frequent_words(E).shape[1] == 1  # only "stone": "the" and "river" tie 50+ chunks


def test_a_query_word_frequent_in_the_text_still_leads_to_its_chunks():
    # "football" is in 40 facts, more than the frequent-word limit; the question still needs them.
    facts = {i * 40: f"Person{i} grabbed the football." for i in range(1, 41)}
    facts[1000] = "Person7 journeyed to the hallway."
    text = haystack(3000, facts, seed=2) + "\nQuestion: Where was the football before the hallway?"
    rank = ranks(text, local_scores, kept_chunks=60)
    assert rank["Person7 grabbed the football."] < 60
    assert rank["Person7 journeyed to the hallway."] < 60


def test_global_scores_favour_chunks_of_the_most_common_words():
    text = " ".join(["Alpha beta gamma."] * 40 + ["Delta epsilon."] * 2) + " Which words are most common?"
    rank = ranks(text, global_scores)
    assert rank["Alpha beta gamma."] < rank["Delta epsilon."]


def test_global_budget_is_not_spent_on_one_cluster_of_near_duplicates():
    # Plain PageRank ranks the five copies highest (degree 5 against ~4.7 for the rest).
    cluster = ["Zeta eta theta iota kappa lambda."] * 5
    spread = [f"Common word{i}." for i in range(60)]
    text = " ".join(cluster + spread) + " Which words are most common?"
    chunks = chunk_text(text)
    texts = chunks.texts()
    scores = global_scores(embed(texts), query_weights(chunks.words), kept_chunks=6)
    top = [texts[i] for i in np.argsort(-scores)[:6]]
    assert sum(t.startswith("Zeta") for t in top) <= 2
    assert sum(t.startswith("Common") for t in top) >= 3
