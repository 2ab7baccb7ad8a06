import numpy as np

from mixpr.chunking import chunk_text
from mixpr.embedding import bm25, count_matrix, embed, tfidf
from mixpr.experts import fuse_ranks, global_scores, local_scores, without_frequent_words
from mixpr.lexical import lexical_scores
from mixpr.query import query_weights

from .filler import haystack


def ranks(text, scorer, **kwargs):
    chunks = chunk_text(text)
    texts = chunks.texts()
    scores = scorer(embed(texts), query_weights(chunks), **kwargs)
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
    scores = global_scores(embed(texts), query_weights(chunks), kept_chunks=6)
    top = [texts[i] for i in np.argsort(-scores)[:6]]
    assert sum(t.startswith("Zeta") for t in top) <= 2
    assert sum(t.startswith("Common") for t in top) >= 3


def test_fusion_ranks_the_best_of_either_list_high_and_skips_zeros():
    graph = np.array([0.9, 0.5, 0.1, 0.0, 0.0])
    lexical = np.array([0.0, 0.2, 0.0, 3.0, 0.0])
    fused = fuse_ranks(graph, lexical)
    assert fused[1] > fused[0] == fused[3] > fused[2] > fused[4] == 0


def test_local_scores_fused_with_bm25_lift_a_long_clause_that_names_the_rare_word_once():
    # 29 short facts share "licensee" and "pay" with the question; the one clause that answers
    # it is long and names "royalties" once. TF-IDF's L2 norm buries it, BM25 ranks it first.
    clause = "Licensee shall pay royalties " + " ".join(f"term{i}" for i in range(25)) + "."
    facts = {i * 10: f"The licensee will pay the fee on time {i}." for i in range(1, 30)}
    facts[150] = clause
    text = haystack(400, facts, seed=4) + "\n\nWhen does the licensee pay royalties?"
    chunks = chunk_text(text)
    texts = chunks.texts()
    counts = count_matrix(texts)
    p = query_weights(chunks)

    def rank(scores):
        order = [texts[i].strip() for i in np.argsort(-scores, kind="stable") if p[i] == 0]
        return order.index(clause)

    graph = local_scores(tfidf(counts), p, kept_chunks=5)
    fused = local_scores(tfidf(counts), p, kept_chunks=5, lexical=lexical_scores(bm25(counts), p))
    assert rank(fused) <= 12 < 20 <= rank(graph)
