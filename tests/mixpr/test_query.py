import random

import numpy as np
import pytest

from mixpr import compress
from mixpr.chunking import chunk_text
from mixpr.query import MAX_QUERY_CHUNKS, query_chunks, query_weights, unlabelled

from .filler import sentences

DOC = "The lease starts in May. Rent is due monthly. The tenant pays for water."


def picked_texts(text, span=None):
    chunks = chunk_text(text)
    texts = chunks.texts()
    return [texts[i].strip() for i in query_chunks(chunks, span)]


def test_without_a_paragraph_the_query_is_the_last_chunk():
    assert picked_texts(DOC + " Who pays for water?") == ["Who pays for water?"]


def test_a_short_last_chunk_brings_the_one_before():
    assert picked_texts(DOC + "\nWho pays for water? A:") == ["Who pays for water?", "A:"]


def test_a_trailing_paragraph_is_the_whole_query():
    question = "Read the lease carefully. Details: who pays for water?"
    expected = ["Read the lease carefully.", "Details: who pays for water?"]
    assert picked_texts(DOC + "\n\n" + question) == expected


def test_a_long_trailing_paragraph_is_not_a_question():
    tail = " ".join(f"Sentence number {i} of the tail." for i in range(MAX_QUERY_CHUNKS + 1))
    assert picked_texts(DOC + "\n\n" + tail) == [f"Sentence number {MAX_QUERY_CHUNKS} of the tail."]


def test_the_callers_span_wins_and_is_capped():
    text = DOC + "\n\nWho pays? Answer in one word."
    start = text.index("Rent")
    assert picked_texts(text, (start, start + 5)) == ["Rent is due monthly."]
    many = " ".join(f"Question part {chr(97 + i)}x." for i in range(20))
    picked = picked_texts(many, (0, len(many)))
    assert len(picked) == MAX_QUERY_CHUNKS and picked[-1] == "Question part tx."


def test_weights_are_uniform_over_the_query_chunks():
    p = query_weights(chunk_text(DOC + "\n\nFirst part. Second part?"))
    assert p.tolist() == [0, 0, 0, 0.5, 0.5]
    assert query_weights(chunk_text("")).tolist() == []
    assert np.isclose(query_weights(chunk_text(DOC)).sum(), 1)


@pytest.mark.parametrize("seed", [0, 2])
def test_a_question_label_does_not_tie_the_question_to_every_sentence_that_says_question(seed):
    # 400 of 6,000 filler sentences say "question"; counted, the label "Question:" made them all
    # neighbours of the question, and they pushed the second hop (where Daniel took the apple) out.
    rng = random.Random(seed)
    filler = sentences(6000, seed=seed)
    for i in rng.sample(range(len(filler)), 400):
        filler[i] = filler[i][:-1] + " and one question remained."
    hops = {1000: "Daniel picked up the apple there.", 4000: "Daniel travelled to the bathroom."}
    for i, fact in hops.items():
        filler.insert(i, fact)
    text = " ".join(filler) + "\n\nQuestion: Where is the apple?"
    kept = compress(text, budget_tokens=1000, route="local").text
    assert all(fact in kept for fact in hops.values())


def test_only_a_one_word_label_at_the_questions_start_is_blanked():
    texts = ["Some text.", "Question: Where is it?", "Lynne Neagle AM: thank you."]
    p = np.array([0.0, 1.0, 0.0])
    assert unlabelled(texts, p) == ["Some text.", "          Where is it?", "Lynne Neagle AM: thank you."]
    first_only = unlabelled(["Details: none", "Where: here"], np.array([1.0, 0.0]))
    assert first_only == ["         none", "Where: here"]
    assert unlabelled(["Lynne Neagle AM: thanks"], np.array([1.0])) == ["Lynne Neagle AM: thanks"]


def test_a_key_term_before_a_colon_stays_in_the_question():
    """Only a label that carries no content is blanked: "Kubernetes: why ..." and "KeyError: 'x' ..."
    open with the very term asked about."""
    p = np.array([0.0, 1.0])
    for question in ["Kubernetes: why does the pod restart?", "KeyError: 'x' raised by the loader, why?",
                     "Renewal: what is the term?"]:
        assert unlabelled(["Some text.", question], p) == ["Some text.", question]
    for label in ["Question", "Q", "QUERY", "Answer", "Context", "Task", "Instruction", "Instructions"]:
        blanked = unlabelled(["Some text.", f"{label}: Where is it?"], p)
        assert blanked == ["Some text.", " " * (len(label) + 2) + "Where is it?"]


def test_a_label_the_text_itself_uses_is_blanked():
    """A word the text opens its own lines with ("Caroline: " turns, "Kubernetes: " entries) is the
    text's format there too."""
    texts = ["Caroline: I went hiking.", "Melanie: Nice!", "Caroline: Where did I go?"]
    assert unlabelled(texts, np.array([0.0, 0.0, 1.0]))[2] == " " * len("Caroline: ") + "Where did I go?"
    assert unlabelled(texts[1:], np.array([0.0, 1.0]))[1] == "Caroline: Where did I go?"
