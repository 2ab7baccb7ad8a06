"""Every budget of at least one token is valid and bounds the result (issue 41): the fit loop never
asks the engine for less than one token, and a result that cannot be chosen small enough (a pinned
chunk, one dense line, a question longer than the budget) is cut to the budget."""

from __future__ import annotations

import random

import pytest

import mixpr
from mixpr.engine import join_spans
from mixpr.tokens import count_tokens

from .filler import haystack

_rng = random.Random(7)
CJK = "".join(chr(_rng.randint(0x4E00, 0x9FFF)) for _ in range(3000))


@pytest.mark.parametrize("text", [haystack(6, {}), "x" * 750, CJK[:90]], ids=["prose", "one-word", "cjk"])
def test_a_short_query_and_a_small_budget_neither_raise_nor_overrun(text):
    """A query of fewer than three words pins the text's last chunk beside it (the paper's answer-prefix
    rule); the fit loop used to ask the engine for less and less until the budget went negative
    (``ValueError: budget_tokens must be a positive integer; got -5``)."""
    for budget in range(1, 31):
        result = mixpr.compress(text, query="value 7", budget_tokens=budget)
        assert count_tokens(result.text) <= budget and result.stats["kept_tokens"] <= budget
        assert join_spans(text, result.spans) == result.text


def test_a_trailing_question_longer_than_the_budget_is_cut_to_the_budget():
    """Without ``query`` the text's trailing paragraph is the question and always kept; when it alone
    is over the budget, the result is the kept text's first ``budget_tokens`` tokens."""
    question = "Which of the rooms that the porter walked past " * 5 + "had the blue door?"
    text = haystack(200, {}) + "\n\n" + question
    result = mixpr.compress(text, budget_tokens=12)
    assert 0 < count_tokens(result.text) <= 12 and result.stats["kept_tokens"] <= 12
    assert join_spans(text, result.spans) == result.text and question.startswith(result.text)


def test_a_dense_line_over_the_budget_is_cut_inside_the_line_with_a_marker():
    """A tool output of one 3,000-character line of CJK: its pieces are cut by characters (800), about
    900 tokens each, more than the budget; the kept piece is cut to fit and a marker says so."""
    for budget in (30, 60, 200):
        result = mixpr.compress(CJK, query="what does it say", kind="auto", budget_tokens=budget)
        assert count_tokens(result.text) <= budget and result.stats["kept_tokens"] <= budget
        assert "omitted" in result.text and result.text.split("\n")[0] in CJK


def test_a_budget_below_one_marker_keeps_the_outputs_head():
    lines = "\n".join(f"line {i} value {i * 7}" for i in range(300))
    for budget in range(1, 8):
        result = mixpr.compress(lines, query="value 7", kind="auto", budget_tokens=budget)
        assert count_tokens(result.text) <= budget and lines.startswith(result.text)


@pytest.mark.parametrize("kind", [None, "auto"])
def test_whitespace_over_the_budget_keeps_nothing(kind):
    text = " \n\t" * 300
    assert count_tokens(text) > 1
    for query in (None, "what is here?"):
        result = mixpr.compress(text, query=query, kind=kind, budget_tokens=1)
        assert result.text == "" and result.stats["kept_tokens"] == 0
