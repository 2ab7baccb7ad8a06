import numpy as np

from mixpr import compress
from mixpr.chunking import chunk_text
from mixpr.structure import arrange, spread, whole_sentences, whole_units


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
    chunks = chunk_text("\n\n".join(f"Paragraph {i} is here." for i in range(10)))
    out = arrange(scores, chunks, pinned=np.array([9]))
    assert out[8] < out[1]


def test_a_unit_that_mostly_matches_is_lifted_a_paragraph_with_one_match_is_not():
    opens = np.array([True, False, False, True, False, False])
    scores = np.array([1.0, 0.8, 0.8, 1.0, 0.0, 0.0])
    out = whole_units(scores, opens)
    assert out[1] > 0.8 and out[2] > 0.8  # lifted towards the best of their unit
    assert out[4] < 0.6  # a lone match does not carry its paragraph


def _chat(evidence_turn: str) -> str:
    """A long chat in which one turn of four short sentences answers the question."""
    other = ["Bob: Nice weather today. I went for a walk. It was fine. See you.",
             "Alice: Good to hear. I stayed home. Read a book. Bye now."]  # fmt: skip
    turns = [other[i % 2] for i in range(120)]
    turns[60] = evidence_turn
    return "\n".join(turns) + "\n\nWhat did Carol bake for the festival?"


def test_a_chat_turn_is_kept_whole():
    # Only the turn's first sentence shares a word with the question; its other three sentences
    # are the evidence too (LoCoMo annotates turns). Without whole units they lose to other turns.
    turn = "Carol: I baked lemon bread for the festival! Everyone loved it. My kids helped me. So proud."
    text = _chat(turn)
    kept = compress(text, budget_tokens=60, route="local").spans
    start = text.index(turn)
    assert any(a <= start and start + len(turn) <= b for a, b in _merged(kept))


def _merged(spans):
    out = []
    for a, b in spans:
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _titled(title: str, sentences: list[str]) -> str:
    return title + "\n" + " ".join(sentences)


def test_a_titled_paragraph_keeps_its_relevance_from_its_neighbours():
    # HotpotQA's shape: Wikipedia paragraphs under their titles, side by side. The answer is a
    # one-sentence paragraph; without a cut at each title its relevance leaks into the unrelated
    # paragraphs around it, and a paragraph whose two sentences both match outranks it.
    facts = ["lies on a river.", "has a bridge.", "has an old market."]
    towns = [_titled(f"Town {i}", [f"Town {i} {fact}" for fact in facts]) for i in range(30)]
    house = _titled(
        "Thomas Wolfe House", ["The Thomas Wolfe House is a museum.", "Thomas Wolfe lived there."]
    )
    person = _titled("Thomas Wolfe", ["Thomas Wolfe was born on October 3, 1900 in Asheville."])
    paragraphs = towns[:12] + [house] + towns[12:20] + [person] + towns[20:]
    text = "\n\n".join(paragraphs) + "\n\nWhen was Thomas Wolfe born?"
    kept = compress(text, top_k=1, route="local")
    assert "born on October 3, 1900" in kept.text
