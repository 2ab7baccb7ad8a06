"""The library's face: ``mixpr.compress(text, query=..., budget_tokens=...)`` as a user first calls it."""

import inspect

import pytest

import mixpr
from mixpr.tokens import count_tokens

from .filler import haystack
from .test_outputs import MARKER, pytest_log

FACT = "The vault code is 4417, and only the night porter knows it."
QUESTION = "What is the vault code?"


def document(count=3000, at=1700):
    return haystack(count, {at: FACT})


def test_public_names_are_pinned():
    assert mixpr.__all__ == ["KINDS", "ROUTES", "Compressed", "compress", "count_tokens", "engine"]


def test_the_face_is_small():
    names = list(inspect.signature(mixpr.compress).parameters)
    assert names == ["text", "query", "budget_tokens", "top_k", "route", "kind", "model", "ask_llm"]


def test_a_first_call_with_a_question_apart_keeps_the_answer_and_not_the_question():
    text = document()
    result = mixpr.compress(text, budget_tokens=300, query=QUESTION)
    assert FACT in result.text and QUESTION not in result.text
    assert count_tokens(result.text) == result.stats["kept_tokens"] <= 300
    assert result.stats["original_tokens"] == count_tokens(text)
    # The spans are the document's own, and joined they give the text.
    assert all(0 <= start < end <= len(text) for start, end in result.spans)
    assert mixpr.engine.join_spans(text, result.spans) == result.text
    assert result.stats["kept_chunks"] == len(result.spans)


def test_the_budget_holds_across_budgets_and_models():
    text = document(2000, 900)
    for budget in (40, 120, 700):
        for model in (None, "gpt-4o"):
            result = mixpr.compress(text, budget_tokens=budget, query=QUESTION, model=model)
            assert count_tokens(result.text, model) == result.tokens <= budget


def test_top_k_keeps_that_many_chunks_of_the_text():
    asked = "Which code does the night porter know?"
    result = mixpr.compress(document(), top_k=4, route="local", query=asked)
    assert FACT in result.text and "night porter know?" not in result.text
    assert len(result.spans) == 4


def test_a_text_that_fits_comes_back_whole():
    text = "A short note. " + FACT
    result = mixpr.compress(text, budget_tokens=300, query=QUESTION)
    assert result.text == text and result.spans == [(0, len(text))]
    assert result.tokens == count_tokens(text)


def test_without_a_query_the_trailing_question_is_found_and_kept():
    text = document() + "\n\n" + QUESTION
    result = mixpr.compress(text, budget_tokens=300)
    assert FACT in result.text and result.text.endswith(QUESTION)


def test_a_blank_query_is_no_query():
    text = document() + "\n\n" + QUESTION
    blank = mixpr.compress(text, budget_tokens=300, query="  ")
    assert blank.text == mixpr.compress(text, budget_tokens=300).text


def test_a_tool_output_by_kind_keeps_its_failure_and_marks_the_cuts():
    result = mixpr.compress(pytest_log(), query="pytest tests/", kind="auto", budget_tokens=150)
    assert "E       AssertionError: assert (1,) == (1, 0)" in result.text
    assert any(MARKER.match(line) for line in result.text.splitlines())
    assert result.stats["kind"] == "log" and count_tokens(result.text) <= 150


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "pdf"}, "kind must be one of auto, code"),
        ({"kind": "auto", "top_k": 3}, "top_k and route are for documents"),
        ({"kind": "log", "route": "local"}, "top_k and route are for documents"),
        ({"budget_tokens": 0}, "budget_tokens must be a positive integer"),
        ({"budget_tokens": None}, "budget_tokens must be a positive integer"),
        ({"route": "sideways"}, "route must be one of auto, heuristic, local, global"),
        ({"top_k": 0}, "top_k must be a positive integer"),
        ({"query": 7}, "query must be a str or None"),
        ({"model": 123}, "model must be a str or None"),  # not an AttributeError (issue 47)
        ({"top_k": True}, "top_k must be a positive integer"),  # as budget_tokens=True is refused
        ({"budget_tokens": True}, "budget_tokens must be a positive integer"),
        ({"top_k": 2, "budget_tokens": True}, "budget_tokens must be a positive integer"),
    ],
)
def test_bad_arguments_say_what_is_valid(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mixpr.compress(document(300, 100), **{"query": QUESTION, **kwargs})


@pytest.mark.parametrize("budget", [5, 10, 15])
def test_a_small_budget_keeps_the_kept_texts_first_tokens(budget):
    """Where no chunk fits whole, the best one's first tokens, as the docstring promises (issue 47:
    "" with a query)."""
    text = document(300, 100)
    for query in (QUESTION, None):
        result = mixpr.compress(text, query=query, budget_tokens=budget)
        assert result.text.strip() and count_tokens(result.text) <= budget, (query, result.text)
        assert mixpr.engine.join_spans(text, result.spans) == result.text


def test_text_must_be_a_string():
    with pytest.raises(ValueError, match="text must be a str"):
        mixpr.compress(b"bytes", query=QUESTION)
