import numpy as np

from mixpr import compress
from mixpr.embedding import bm25, count_matrix, counts_and_words
from mixpr.lexical import PREFIX_CHARS, VARIANT_WEIGHT, compounds, lexical_scores, query_vector

from .filler import sentences

QUESTION = "Who made the most three pointers in one game?"
ANSWER = "Most 3 - point field goals made in a game: 13 by Stephen Curry."
DECOY = "Most rebounds made in a game: 55 by Wilt Chamberlain."


def _weights(texts: list[str]):
    counts, words = counts_and_words(texts)
    p = np.zeros(len(texts))
    p[-1] = 1.0
    return bm25(counts), p, words


def test_lexical_scores_ignore_question_words_found_in_most_chunks():
    texts = [f"The contract clause {i} of this agreement." for i in range(40)]
    texts[17] = "Royalties are paid each quarter."
    texts.append("Which part of this contract says how royalties are paid?")
    W = bm25(count_matrix(texts))
    p = np.zeros(len(texts))
    p[-1] = 1.0
    scores = lexical_scores(W, p)
    # "contract" and "this" are in every chunk: left out, so only chunk 17 (and the query) match.
    assert np.flatnonzero(scores[:-1]).tolist() == [17]


def test_a_question_word_matches_words_that_share_its_first_five_characters_at_half_weight():
    texts = [
        *sentences(30, seed=1),
        "The pointer moved.",
        "A red poinsettia.",
        "Pointers everywhere.",
        QUESTION,
    ]
    W, p, words = _weights(texts)
    q = query_vector(W, p, words)
    column = {w: i for i, w in enumerate(words)}
    assert PREFIX_CHARS == 5
    assert q[column["pointers"]] == 1.0
    assert q[column["pointer"]] == VARIANT_WEIGHT == 0.5
    assert q[column["poinsettia"]] == 0.0  # shares only "poin"
    assert q[column["game"]] == 1.0 and q[column["one"]] == 1.0  # too short to have variants


def test_variants_rank_the_chunk_that_says_point_above_one_that_only_shares_most_and_game():
    texts = [*sentences(40, seed=2), DECOY, ANSWER, QUESTION]
    W, p, words = _weights(texts)
    plain, varied = lexical_scores(W, p), lexical_scores(W, p, words)
    answer, decoy = len(texts) - 2, len(texts) - 3
    # Without variants both share only "most", "made", "game", and the shorter decoy wins.
    assert 0 < plain[answer] < plain[decoy]
    assert varied[answer] > varied[decoy] == plain[decoy]


def test_compress_keeps_the_paragraph_of_the_season_the_question_names():
    filler = sentences(40, seed=5)
    paragraphs = [
        f"Season {n} premiered on April {20 + n} , {2016 + n} . " + " ".join(filler[10 * k : 10 * k + 10])
        for k, n in enumerate((4, 2, 1, 3))
    ]
    text = "\n".join(paragraphs) + "\n\nWhen did season 2 premiere?"
    kept = compress(text, top_k=1, route="local").text
    assert kept.startswith("Season 2 premiered on April 22 , 2018 .")


def test_compress_keeps_the_record_a_question_asks_in_other_words():
    text = " ".join(sentences(60, seed=6)) + f"\n{DECOY}\n{ANSWER}\n\n{QUESTION}"
    kept = compress(text, top_k=1, route="local").text
    assert ANSWER in kept and DECOY not in kept


def _pasted(name_chunks: int) -> list[str]:
    """Three documents pasted at once, the middle one about "Potter" (the name in ``name_chunks`` of
    its chunks), then a question about it in everyday words."""
    before, after = sentences(40, seed=7), sentences(30, seed=8)
    middle = [f"{s} So Potter says." for s in sentences(name_chunks, seed=10)]
    middle[name_chunks // 2] = "The first Potter book came out in 1997."
    decoy = "Their first book came out in 2001."
    return [*before[:20], decoy, *before[20:], *middle, *after, "When did the first Potter book come out?"]


def test_a_name_one_pasted_document_repeats_still_counts_as_a_question_word():
    texts = _pasted(30)  # "potter" in 30 of 101 chunks: frequent, but only in the middle document
    W, p, words = _weights(texts)
    column = {w: i for i, w in enumerate(words)}
    q = query_vector(W, p, words)
    assert q[column["potter"]] == 1.0
    scores = lexical_scores(W, p, words)
    answer, decoy = texts.index("The first Potter book came out in 1997."), 20
    # Without the topic word both share "first", "book" and "out", and the shorter decoy wins.
    assert scores[answer] > scores[decoy]


def test_a_word_every_part_of_the_text_uses_stays_out_of_the_question():
    texts = [f"{s} The contract applies." for s in sentences(60, seed=9)]
    texts[31] = "Royalties are paid each quarter under the contract."
    texts.append("When are royalties paid under the contract?")
    W, p, words = _weights(texts)
    column = {w: i for i, w in enumerate(words)}
    q = query_vector(W, p, words)
    assert q[column["contract"]] == 0.0 and q[column["royalties"]] == 1.0


LICENSE_QUESTION = "Does the contract limit the ability of a party to transfer the Non-Transferable License?"
LICENSE_ANSWER = "Vendor grants Reseller a nontransferable license to resell the Products."
LICENSE_DECOY = "The license fee is paid by the party each quarter."


def test_a_compound_the_question_writes_open_matches_the_text_s_closed_spelling():
    texts = [*sentences(40, seed=7), LICENSE_DECOY, LICENSE_ANSWER, LICENSE_QUESTION]
    W, p, words = _weights(texts)
    column = {w: i for i, w in enumerate(words)}
    assert query_vector(W, p, words, LICENSE_QUESTION)[column["nontransferable"]] == 1.0
    scores = lexical_scores(W, p, words, LICENSE_QUESTION)
    # Without the compound the decoy shares "license" and "party", the answer only "license".
    assert scores[len(texts) - 2] > scores[len(texts) - 3]


def test_only_neighbouring_words_of_seven_characters_or_more_are_read_as_compounds():
    question = "Can any one go into it, and can it be ended for cause?"
    texts = [*sentences(40, seed=8), "Anyone may call.", "Into the night.", "It failed because of rain.",
             question]
    W, p, words = _weights(texts)
    column = {w: i for i, w in enumerate(words)}
    q = query_vector(W, p, words, question)
    assert q[column["anyone"]] == 0.0  # six characters: "any one" stays two words
    assert q[column["because"]] == 0.0  # "be" and "cause" are not neighbours
    assert q[column["into"]] == 1.0  # asked as written
    assert compounds("non-transferable license") == {"nontransferable", "transferablelicense"}
