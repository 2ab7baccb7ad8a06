"""MixPRCompressor against the real langchain-core interface, and inside LangChain's
ContextualCompressionRetriever (langchain-classic) over an in-memory vector store."""

import asyncio

import pytest

from mixpr.engine import join_spans
from mixpr.tokens import count_tokens

from .corpus import FACT, HOLDER, QUERY, SHORT_QUERIES, SMALL_BUDGETS, dense, texts

# Each test imports langchain-core (and LangSmith, which it brings) itself: every pytest worker collects
# this module, one runs it.


def documents():
    from langchain_core.documents import Document

    return [Document(page_content=t, metadata={"source": f"doc-{i}"}, id=str(i))
            for i, t in enumerate(texts())]


def test_documents_with_nothing_kept_are_left_out():
    from mixpr.integrations.langchain import MixPRCompressor

    kept = MixPRCompressor(budget_tokens=40).compress_documents(documents(), QUERY)
    assert 0 < len(kept) < len(texts()) and str(HOLDER) in [d.id for d in kept]


def test_is_a_langchain_document_compressor():
    from langchain_core.documents import BaseDocumentCompressor

    from mixpr.integrations.langchain import MixPRCompressor

    assert isinstance(MixPRCompressor(), BaseDocumentCompressor)
    with pytest.raises(ValueError):
        MixPRCompressor(budget_tokens=0)


def test_keeps_the_best_chunks_within_the_budget_in_order_and_says_what_was_cut():
    from mixpr.integrations.langchain import MixPRCompressor

    originals = documents()
    kept = MixPRCompressor(budget_tokens=300).compress_documents(originals, QUERY)
    assert any(FACT in d.page_content for d in kept)
    assert sum(count_tokens(d.page_content) for d in kept) <= 300
    by_id = {d.id: d for d in originals}
    ids = [d.id for d in kept]
    assert ids == sorted(ids, key=int) and str(HOLDER) in ids
    for doc in kept:
        original = by_id[doc.id]
        cut = doc.metadata["mixpr"]
        assert doc.metadata["source"] == original.metadata["source"]
        assert join_spans(original.page_content, cut["kept_spans"]) == doc.page_content
        assert cut["kept_tokens"] == count_tokens(doc.page_content) < cut["original_tokens"] and cut["cut"]


def test_documents_that_fit_come_back_whole():
    from langchain_core.documents import Document

    from mixpr.integrations.langchain import MixPRCompressor

    short = [Document(page_content="A note. " + FACT), Document(page_content="Another short note.")]
    kept = MixPRCompressor(budget_tokens=300).compress_documents(short, QUERY)
    assert [d.page_content for d in kept] == [d.page_content for d in short]
    assert not any(d.metadata["mixpr"]["cut"] for d in kept)


def test_no_documents_and_an_empty_query():
    from mixpr.integrations.langchain import MixPRCompressor

    assert MixPRCompressor().compress_documents([], QUERY) == []
    with pytest.raises(ValueError, match="needs the query"):
        MixPRCompressor(budget_tokens=50).compress_documents(documents(), " ")


def test_in_a_contextual_compression_retriever_sync_and_async():
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    from mixpr.integrations.langchain import MixPRCompressor

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    store.add_documents(documents())
    retriever = ContextualCompressionRetriever(
        base_compressor=MixPRCompressor(budget_tokens=300),
        base_retriever=store.as_retriever(search_kwargs={"k": len(texts())}),
    )
    for found in (retriever.invoke(QUERY), asyncio.run(retriever.ainvoke(QUERY))):
        assert any(FACT in d.page_content for d in found)
        assert sum(count_tokens(d.page_content) for d in found) <= 300


def test_small_budgets_and_short_queries_neither_raise_nor_overrun():
    """The fit loop used to drive its budget below one (``ValueError``) when a short query pinned the last
    text's last chunk, here a dense one bigger than the budget."""
    from langchain_core.documents import Document

    from mixpr.integrations.langchain import MixPRCompressor

    docs = [Document(page_content=t) for t in (*texts(2, 20), dense())]
    for query in SHORT_QUERIES:
        for budget in (5, 10, 15, *SMALL_BUDGETS):
            kept = MixPRCompressor(budget_tokens=budget).compress_documents(docs, query)
            assert sum(count_tokens(d.page_content) for d in kept) <= budget
            assert kept, (query, budget)  # the best chunk's first tokens at least (issue 47: nothing)


def test_empty_documents_come_back_untouched():
    """An empty document (an image's, a metadata-only one) costs nothing: it is kept as it came, whether
    the others fit or are cut."""
    from langchain_core.documents import Document

    from mixpr.integrations.langchain import MixPRCompressor

    empty = Document(page_content="", metadata={"image": "figure-3.png"}, id="empty")
    for budget in (100_000, 40):  # all fit; the others are cut
        kept = MixPRCompressor(budget_tokens=budget).compress_documents([*documents()[:3], empty], QUERY)
        assert kept[-1] is empty
