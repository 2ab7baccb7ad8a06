"""MixPRNodePostprocessor against the real llama-index-core interface, and in a query engine over a
VectorStoreIndex with llama-index-core's mock embedding and mock LLM (which echoes its prompt)."""

import pytest

from mixpr.engine import join_spans
from mixpr.tokens import count_tokens

from .corpus import FACT, HOLDER, QUERY, SHORT_QUERIES, SMALL_BUDGETS, dense, texts

# Each test imports llama-index-core (and the SQLAlchemy, NLTK and PIL it brings) itself: every pytest
# worker collects this module, one runs it, and the import costs each a second, several on a fresh clone.


def nodes():
    from llama_index.core.schema import NodeWithScore, TextNode

    return [NodeWithScore(node=TextNode(text=t, id_=str(i), metadata={"source": f"doc-{i}"}),
                          score=1.0 - i / 10) for i, t in enumerate(texts())]  # fmt: skip


def test_documents_with_nothing_kept_are_left_out():
    from mixpr.integrations.llama_index import MixPRNodePostprocessor

    kept = MixPRNodePostprocessor(budget_tokens=40).postprocess_nodes(nodes(), query_str=QUERY)
    assert 0 < len(kept) < len(texts()) and str(HOLDER) in [n.node.node_id for n in kept]


def test_is_a_llama_index_node_postprocessor():
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    from mixpr.integrations.llama_index import MixPRNodePostprocessor

    assert isinstance(MixPRNodePostprocessor(), BaseNodePostprocessor)
    with pytest.raises(ValueError):
        MixPRNodePostprocessor(budget_tokens=0)


def test_keeps_the_best_chunks_within_the_budget_in_order_and_says_what_was_cut():
    from llama_index.core.schema import MetadataMode

    from mixpr.integrations.llama_index import MixPRNodePostprocessor

    originals = nodes()
    kept = MixPRNodePostprocessor(budget_tokens=300).postprocess_nodes(originals, query_str=QUERY)
    texts_kept = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in kept]
    assert any(FACT in t for t in texts_kept) and sum(count_tokens(t) for t in texts_kept) <= 300
    ids = [n.node.node_id for n in kept]
    assert ids == sorted(ids, key=int) and str(HOLDER) in ids
    by_id = {n.node.node_id: n for n in originals}
    for found, text in zip(kept, texts_kept, strict=True):
        original = by_id[found.node.node_id]
        cut = found.node.metadata["mixpr"]
        assert found.score == original.score
        assert found.node.metadata["source"] == original.node.metadata["source"]
        assert join_spans(original.node.get_content(), cut["kept_spans"]) == text and cut["cut"]
        # What was cut is for the caller, not for the LLM's prompt or the embedding.
        assert "mixpr" not in found.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "mixpr" not in found.node.get_content(metadata_mode=MetadataMode.EMBED)
    assert originals[HOLDER].node.get_content() == texts()[HOLDER]  # the input nodes are not changed


def test_needs_a_query():
    from llama_index.core.schema import QueryBundle

    from mixpr.integrations.llama_index import MixPRNodePostprocessor

    with pytest.raises(ValueError, match="needs the query"):
        MixPRNodePostprocessor().postprocess_nodes(nodes())
    assert MixPRNodePostprocessor().postprocess_nodes([], QueryBundle(QUERY)) == []


def test_in_a_query_engine_over_a_vector_store_index():
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM

    from mixpr.integrations.llama_index import MixPRNodePostprocessor

    documents = [Document(text=t) for t in texts()]
    index = VectorStoreIndex.from_documents(documents, embed_model=MockEmbedding(embed_dim=8))
    # similarity_top_k: every node (the mock embeds them all alike), so the answer's node is among them.
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=100,
                                   node_postprocessors=[MixPRNodePostprocessor(budget_tokens=300)])
    response = engine.query(QUERY)
    context = [n.node.get_content() for n in response.source_nodes]
    assert any(FACT in c for c in context) and sum(count_tokens(c) for c in context) <= 300
    assert FACT in str(response)  # MockLLM echoes the prompt: the kept text reached the LLM
    assert count_tokens(str(response)) < sum(count_tokens(t) for t in texts()) / 4


def test_small_budgets_and_short_queries_neither_raise_nor_overrun():
    """The fit loop used to drive its budget below one (``ValueError``) when a short query pinned the last
    node's last chunk, here a dense one bigger than the budget."""
    from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

    from mixpr.integrations.llama_index import MixPRNodePostprocessor

    found = [NodeWithScore(node=TextNode(text=t), score=0.5) for t in (*texts(2, 20), dense())]
    for query in SHORT_QUERIES:
        for budget in SMALL_BUDGETS:
            kept = MixPRNodePostprocessor(budget_tokens=budget).postprocess_nodes(found, query_str=query)
            assert sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in kept) \
                <= budget


def test_empty_nodes_come_back_untouched():
    """An image node and a metadata-only node have no text: they cost nothing and are kept as they came,
    whether the other nodes fit or are cut."""
    from llama_index.core.schema import ImageNode, NodeWithScore, TextNode

    from mixpr.integrations.llama_index import MixPRNodePostprocessor

    image = NodeWithScore(node=ImageNode(image_url="https://example.com/f3.png", id_="image"), score=0.9)
    meta = NodeWithScore(node=TextNode(text="", metadata={"table": "t1"}, id_="meta"), score=0.8)
    for budget in (100_000, 40):  # all fit; the others are cut
        kept = MixPRNodePostprocessor(budget_tokens=budget).postprocess_nodes([*nodes()[:3], image, meta],
                                                                              query_str=QUERY)
        assert kept[-2:] == [image, meta] and kept[-2] is image and kept[-1] is meta
