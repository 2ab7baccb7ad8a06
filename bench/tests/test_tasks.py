"""Self-checks for the task generators and metrics: .venv/bin/python -m pytest bench/tests -q"""

from __future__ import annotations

import time

import pytest

from bench import metrics
from bench.tasks import FAMILY, TASKS, babilong, generate
from bench.tasks.hashhop import chain_lines

ALL = list(TASKS)
# The generators read the shared corpus (books, bAbI) that sits beside the repository here; a clone
# without it runs them on a stand-in from the standard library (conftest.py, standin.py).


@pytest.fixture(scope="module", params=[4096, 32768], ids=["4k", "32k"])
def samples(request):
    return {task: generate(task, request.param, seed=7) for task in ALL}


@pytest.mark.parametrize("task", ALL)
def test_needles_are_in_the_text(samples, task):
    s = samples[task]
    assert s.family == FAMILY[task]
    if s.family == "global":
        assert s.top_words and not s.needles
    else:
        assert s.needles and all(n in s.text for n in s.needles)


@pytest.mark.parametrize("task", ALL)
def test_length_within_5_percent(samples, task):
    s = samples[task]
    assert abs(s.tokens - s.length) <= 0.05 * s.length


@pytest.mark.parametrize("task", ALL)
def test_query_is_at_the_end_after_the_context(samples, task):
    s = samples[task]
    lo, hi = s.context_span
    assert s.query and s.text.rstrip().endswith(s.query.rstrip())
    assert 0 <= lo < hi <= len(s.text) - len(s.query.rstrip())
    for needle in s.needles:  # needles live in the compressible context, not in the question
        assert s.text.find(needle) < hi


@pytest.mark.parametrize("task", ALL)
def test_deterministic_by_seed(task):
    a, b, c = generate(task, 4096, 3), generate(task, 4096, 3), generate(task, 4096, 4)
    assert a.text == b.text and a.needles == b.needles and a.top_words == b.top_words
    assert a.text != c.text


@pytest.mark.parametrize("task", ["cwe", "fwe"])
def test_global_reference_top_words_match_the_answer(samples, task):
    s = samples[task]
    lo, hi = s.context_span
    assert set(metrics.top_words(s.text[lo:hi], task)) == set(s.top_words)
    assert metrics.top_word_overlap(s, [(0, len(s.text))]) == 1.0


def test_hashhop_needles_are_the_queried_chain():
    s = generate("hashhop_4", 8192, 1)
    heads = [line.split(" = ")[0] for line in s.needles]
    assert s.query.rstrip().endswith(f"{heads[0]} = '")
    assert len(s.needles) == 4 and s.needles[-1].endswith("'")
    chain = [heads[0]] + [line.split(" = ")[1].strip("'") for line in s.needles]
    assert chain_lines(chain) == s.needles


def test_babilong_keeps_fact_order_and_question_last():
    s = generate("babilong_qa3", 8192, 2)
    positions = [s.text.find(n) for n in s.needles]
    assert all(p >= 0 for p in positions)
    assert s.text.rstrip().endswith("?") and "Question: " in s.query


def test_metrics_recall_and_span_recall():
    s = generate("niah_multivalue", 4096, 0)
    first = s.text.find(s.needles[0])
    assert metrics.needle_recall(s, s.text) == 1.0
    assert metrics.needle_recall(s, s.needles[0]) == 0.25
    assert metrics.span_recall(s, [(first, first + len(s.needles[0]))]) == 0.25


def test_one_million_tokens_in_seconds():
    t0 = time.perf_counter()
    s = generate("niah_single_2", 1024**2, 0)
    assert time.perf_counter() - t0 < 20
    assert abs(s.tokens - s.length) <= 0.05 * s.length


@pytest.mark.parametrize("task", sorted(babilong.FAMILY))
def test_babi_answers_are_in_their_supporting_facts(task, benchmark_data):
    """Of the real bAbI files, or of the stand-in's (bench/tests/standin.py) on a clone without them."""
    samples = babilong.load_babi(task)
    assert len(samples) >= 100, benchmark_data
    for sample in samples:
        assert sample.supporting and set(sample.supporting) <= set(sample.facts)
        assert any(sample.answer.split(",")[0] in fact for fact in sample.supporting), sample
