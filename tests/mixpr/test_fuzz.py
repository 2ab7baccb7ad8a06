"""A fuzz of the library's face (issue 41): ``mixpr.compress`` and both integrations, on random texts
(empty, whitespace only, CJK, one huge line, code, prose, random unicode, and mixes of them), random
queries and every budget from 1 to 500. Every call returns (no exception on valid input) and no result
is over its budget; a document's spans rebuild its text, and empty documents come back untouched. A
document with any text keeps some of it whenever one of its characters fits the budget (issue 47: with
a query, budgets of 5 to 15 tokens came back ""), and a bool is never taken for a number.

``make test`` runs a bounded profile (``mixpr-ci``: few examples, derandomized); ``make fuzz`` a longer
one (``HYPOTHESIS_PROFILE=fuzz``). Examples found are kept below as ``@example``s.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import mixpr
from mixpr.engine import join_spans
from mixpr.tokens import count_tokens

from .filler import haystack

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("mixpr-ci", max_examples=20, deadline=None, derandomize=True,
                          suppress_health_check=_SLOW)
settings.register_profile("mixpr-fuzz", max_examples=1000, deadline=None, suppress_health_check=_SLOW)
PROFILE = settings.get_profile("mixpr-" + os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _listing(seed: int, lines: int) -> str:
    return "\n".join(f"{i:5}\tdef handler_{seed}_{i}(value):  return parse(value, {i})" for i in range(lines))


def _log(seed: int, lines: int) -> str:
    rows = [f"2024-01-02 10:{i % 60:02}:00 INFO worker {seed} step {i} ok" for i in range(lines)]
    rows[lines // 2] = f"2024-01-02 10:30:00 ERROR worker {seed} failed: KeyError('vault_{seed}')"
    return "\n".join(rows)


cjk = st.text(st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), min_size=1, max_size=3000)
single_texts = st.one_of(
    st.just(""),
    st.text(st.sampled_from(" \t\n\r\u3000"), max_size=2000),  # whitespace only
    cjk,
    st.builds(lambda piece, n: piece * n, st.sampled_from(["x", "ab ", "9,", "é", "门"]),
              st.integers(1, 20_000)),  # one huge line
    st.builds(_listing, st.integers(0, 99), st.integers(1, 300)),
    st.builds(_log, st.integers(0, 99), st.integers(2, 300)),
    st.builds(lambda n, seed: haystack(n, {}, seed), st.integers(1, 150), st.integers(0, 9)),
    st.text(max_size=300),
)
texts = st.one_of(single_texts, st.builds("\n\n".join, st.lists(single_texts, min_size=2, max_size=4)))
asked = st.sampled_from(["value 7", "门", "x", "What is the vault code?", "which handler parses 42",
                         "KeyError vault", "Summarise the whole text."])
queries = st.one_of(st.none(), st.just(""), asked, st.text(max_size=40))
budgets = st.integers(1, 500)


@settings(PROFILE)
@given(text=texts, query=queries, budget=budgets,
       kind=st.sampled_from([None, None, "auto", "code", "log", "json", "grep", "diff", "prose"]),
       route=st.sampled_from(["auto", "heuristic", "local", "global"]))
@example(text="x" * 750, query="value 7", budget=4, kind=None, route="auto")  # got -5 (issue 41)
@example(text="门" * 3000, query="what does it say", budget=30, kind="auto", route="auto")
@example(text=" \n\t" * 300, query=None, budget=1, kind=None, route="auto")
@example(text=haystack(40, {}, 1), query="What is the vault code?", budget=10, kind=None,
         route="auto")  # "" (issue 47)
def test_compress_returns_within_the_budget(text, query, budget, kind, route):
    result = mixpr.compress(text, query=query, budget_tokens=budget, kind=kind,
                            route=route if kind is None else "auto")  # fmt: skip
    tokens = count_tokens(result.text)
    event("cut to the budget" if result.stats.get("cut_to_budget") else "chosen within the budget")
    assert tokens <= budget and result.stats["kept_tokens"] <= budget, (tokens, budget)
    if kind is None:
        assert join_spans(text, result.spans) == result.text
        if text.strip() and max(count_tokens(c) for c in set(text)) <= budget:  # its first tokens, at least
            assert result.text, (budget, query)


@settings(PROFILE)
@given(name=st.sampled_from(["budget_tokens", "top_k"]),
       value=st.sampled_from([True, False, 0, -3, 2.5, "9"]))
def test_a_count_that_is_no_positive_integer_is_refused(name, value):
    with pytest.raises(ValueError, match=name):
        mixpr.compress("Some text. " * 50, query="text", **{name: value})


documents = st.lists(texts, min_size=1, max_size=5)


@settings(PROFILE)
@given(contents=documents, query=asked | st.text(min_size=1, max_size=40).filter(str.strip), budget=budgets)
@example(contents=["x" * 3000, "", "门" * 900], query="value 7", budget=20)
@example(contents=[haystack(300, {}, 1), haystack(40, {}, 2)], query="What is the vault code?",
         budget=5)  # nothing kept (issue 47)
def test_the_integrations_return_within_the_budget(contents, query, budget):
    from langchain_core.documents import Document
    from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

    from mixpr.integrations.langchain import MixPRCompressor
    from mixpr.integrations.llama_index import MixPRNodePostprocessor
    docs = [Document(page_content=c, id=str(i)) for i, c in enumerate(contents)]
    kept = MixPRCompressor(budget_tokens=budget).compress_documents(docs, query)
    assert sum(count_tokens(d.page_content) for d in kept) <= budget
    if "".join(contents).strip() and max(count_tokens(c) for c in set("".join(contents))) <= budget:
        assert any(d.page_content for d in kept), budget  # the best chunk's first tokens, at least
    by_id = {d.id: d for d in docs}
    for doc in kept:
        if doc.page_content:
            spans = doc.metadata["mixpr"]["kept_spans"]
            assert join_spans(by_id[doc.id].page_content, spans) == doc.page_content
    assert [d for d in docs if not d.page_content] == [d for d in kept if not d.page_content]

    nodes = [NodeWithScore(node=TextNode(text=c, id_=str(i)), score=1.0) for i, c in enumerate(contents)]
    found = MixPRNodePostprocessor(budget_tokens=budget).postprocess_nodes(nodes, query_str=query)
    assert sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in found) <= budget
    assert [n for n in nodes if not n.node.get_content()] == [n for n in found if not n.node.get_content()]
