import re

import pytest

import mixpr.engine
from mixpr.engine import compress
from mixpr.tokens import count_tokens

from .filler import haystack, sentences

NEEDLE = "One of the special magic numbers for gentle-harbor is: 7491302."
QUESTION = (
    "\nWhat is the special magic number for gentle-harbor mentioned in the provided text? "
    "The special magic number for gentle-harbor mentioned in the provided text is"
)


def needle_prompt(count=3000, at=1234, seed=0):
    return (
        "A special magic number is hidden within the following text.\n"
        + haystack(count, {at: NEEDLE}, seed)
        + QUESTION
    )


def test_public_names_are_pinned():
    assert mixpr.engine.__all__ == ["METHODS", "ROUTES", "Compressed", "assemble", "compress", "join_spans"]


def test_keeps_needle_and_question_within_budget():
    text = needle_prompt()
    result = compress(text, budget_tokens=500, route="local")
    assert NEEDLE in result.text
    assert result.text.endswith(QUESTION.strip())
    assert 450 <= result.stats["kept_tokens"] <= 500
    assert result.stats["kept_tokens"] == count_tokens(result.text)
    assert result.stats["original_tokens"] == count_tokens(text)


def test_kept_chunks_keep_their_original_order_and_text():
    text = needle_prompt()
    result = compress(text, budget_tokens=800, route="local")
    assert result.spans == sorted(result.spans)
    position = 0
    for start, end in result.spans:
        position = result.text.index(text[start:end], position)


@pytest.mark.parametrize("model", ["gpt-4", "gpt-4o"])
@pytest.mark.parametrize("ask", [{"budget_tokens": 300}, {"budget_tokens": 2500}, {"top_k": 7}],
                         ids=["300 tokens", "2500 tokens", "top 7"])
def test_a_compressed_text_comes_with_its_exact_count(model, ask):
    """``tokens`` is what the gateway uses instead of encoding the kept text again: the exact count of
    ``text``, which is the spans joined as ``join_spans`` joins them."""
    text = re.sub(r"\. (?=[A-Z])", lambda m: ".\n\n" if m.start() % 7 == 0 else ". ", needle_prompt())
    result = compress(text, route="local", model=model, **ask)
    assert len(result.spans) > 1 and result.text == mixpr.engine.join_spans(text, result.spans)
    assert result.tokens == count_tokens(result.text, model)


def test_text_that_fits_is_returned_untouched():
    text = "  Short prompt.\n\nWhat is it?  "
    result = compress(text, budget_tokens=100)
    assert result.text == text
    assert result.spans == [(0, len(text))]
    assert result.stats["route"] is None


def test_top_k_keeps_k_chunks_plus_the_query():
    result = compress(needle_prompt(), top_k=5, route="local")
    assert result.stats["kept_chunks"] == 6
    assert NEEDLE in result.text


def test_two_hop_fact_found_by_mixpr_but_not_by_rag_sparse():
    facts = {
        600: "Daniel picked up the football there.",
        1500: "Daniel travelled to the office.",
    }
    text = haystack(3000, facts, seed=4) + "\nQuestion: Where is the football? "
    mixpr_result = compress(text, top_k=8, route="local")
    rag_result = compress(text, top_k=8, method="rag-sparse")
    assert all(fact in mixpr_result.text for fact in facts.values())
    assert facts[1500] not in rag_result.text


def test_global_route_keeps_the_frequent_words():
    import random

    rng = random.Random(3)
    common = [f"common{i}" for i in range(5)]
    rare = [f"rare{i}" for i in range(2000)]
    words = common * 60 + rare * 3
    rng.shuffle(words)
    listing = " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))
    text = f"Below is a numbered list of words.\n{listing}\nQuestion: What are the 5 most common words?"
    result = compress(text, budget_tokens=1500, route="auto")
    assert result.stats["route"] == "global"
    kept = re.findall(r"[a-z]+\d+", result.text)
    top = sorted(set(kept), key=kept.count, reverse=True)[:5]
    assert sorted(top) == sorted(common)


def test_auto_route_asks_the_llm_with_the_papers_prompt():
    prompts = []

    def ask(prompt):
        prompts.append(prompt)
        return "n"

    result = compress(needle_prompt(), budget_tokens=300, route="auto", ask_llm=ask)
    assert result.stats["route"] == "local" and result.stats["router"] == "llm"
    assert len(prompts) == 1 and prompts[0].startswith("If the query asks for summarization")
    assert "gentle-harbor mentioned in the provided text is" in prompts[0]


def test_middle_out_keeps_head_and_tail():
    text = needle_prompt()
    result = compress(text, budget_tokens=300, method="middle-out")
    assert result.text.startswith("A special magic number is hidden")
    assert result.text.endswith(QUESTION.strip())
    assert NEEDLE not in result.text


def test_boundaries_are_never_crossed():
    first = " ".join(sentences(200, seed=8))
    text = first + "no stop here" + QUESTION
    cut = len(first) + len("no stop")
    result = compress(text, budget_tokens=200, boundaries=[cut])
    assert all(not (start < cut < end) for start, end in result.spans)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "bm25"}, "method must be one of mixpr, rag-sparse, middle-out"),
        ({"route": "sideways"}, "route must be one of auto, heuristic, local, global"),
        ({"budget_tokens": 0}, "budget_tokens must be a positive integer"),
        ({"top_k": -1}, "top_k must be a positive integer"),
    ],
)
def test_bad_arguments_say_what_is_valid(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compress("text", **kwargs)


def test_empty_text():
    result = compress("", budget_tokens=10)
    assert result.text == "" and result.spans == [] and result.stats["kept_chunks"] == 0


@pytest.mark.parametrize("route", ["local", "global"])
def test_a_text_without_words_is_still_cut_to_the_budget(route):
    # One-letter tokens give the vectorizer no vocabulary: nothing to rank on, yet no crash.
    text = "w " * 5000
    result = compress(text, budget_tokens=200, route=route)
    assert 0 < count_tokens(result.text) <= 200


def test_budget_below_the_query_keeps_just_the_query():
    result = compress(needle_prompt(), budget_tokens=5, route="local")
    assert result.text.strip() == QUESTION.strip().split("? ")[-1]


def test_query_span_personalises_on_the_whole_question():
    fact = "The keeper hid the brass key under the old mill."
    question = "Think about the brass key. Where could somebody find it?"
    text = haystack(3000, {1500: fact}, seed=3) + "\n" + question
    start = len(text) - len(question)
    with_span = compress(text, budget_tokens=300, route="local", query_span=(start, len(text)))
    assert fact in with_span.text and with_span.text.endswith(question)
    # Without the span the query is only the last sentence, which never names the key.
    assert fact not in compress(text, budget_tokens=300, route="local").text


def test_a_trailing_paragraph_is_the_query_without_a_span():
    fact = "The keeper hid the brass key under the old mill."
    question = "Think about the brass key. Where could somebody find it?"
    text = haystack(3000, {1500: fact}, seed=3) + "\n\n" + question
    assert fact in compress(text, budget_tokens=300, route="local").text


@pytest.mark.parametrize("span", [(5, 5), (-1, 4), (0, 10**9), (1.5, 4), "ab", (1, 2, 3)])
def test_a_bad_query_span_is_refused(span):
    with pytest.raises(ValueError, match="query_span"):
        compress("Some text. " * 50, budget_tokens=10, query_span=span)


def test_a_long_clause_is_kept_whole_when_one_piece_matches():
    # A 115-word sentence becomes four chunks; only its first names the question's rare word,
    # and 21 short facts share its other word ("paid"), so its last pieces would lose to them.
    clause = "The licensee shall pay royalties " + " ".join(f"condition{i}" for i in range(110)) + "."
    facts = {i * 90: f"The bill was paid on day {i}." for i in range(1, 22)}
    facts[1000] = clause
    text = haystack(2000, facts, seed=5) + "\n\nWhen are royalties paid?"
    assert clause in compress(text, budget_tokens=500, route="local").text


def test_heuristic_route_reads_the_request_not_the_documents_first_words():
    # A page whose banner says "summary" (a Wikipedia cleanup notice) with a local question after it.
    banner = "Derek Shepherd - Wikipedia. This article's plot summary may be too long. "
    page = banner + haystack(600, {300: NEEDLE})
    question = "What is the special magic number for gentle-harbor?"
    asked = compress(f"{page}\n\n{question}", budget_tokens=300, route="heuristic")
    assert asked.stats["route"] == "local" and "7491302" in asked.text
    told = compress(f"Summarize the following text.\n{page}", budget_tokens=300, route="heuristic")
    assert told.stats["route"] == "global"
