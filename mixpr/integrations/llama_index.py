"""MixPR as a LlamaIndex node postprocessor (``pip install 'mixpr-gateway[llama-index]'``).

    from mixpr.integrations.llama_index import MixPRNodePostprocessor

    engine = index.as_query_engine(similarity_top_k=20,
                                   node_postprocessors=[MixPRNodePostprocessor(budget_tokens=1000)])

The retrieved nodes are ranked together, chunk by chunk, against the query; the best chunks are kept
within ``budget_tokens`` (in all), each node's in its order. A node with nothing kept is dropped, a
node with no text (an image node, a metadata-only node) comes back untouched; the others keep their
order and score, and their text is the kept part. ``metadata["mixpr"]`` says
what was cut (``kept_spans`` of the original text, ``original_tokens``, ``kept_tokens``, ``cut``)
and is left out of what the LLM and the embedding model read. CPU only, no model.
"""

from __future__ import annotations

try:
    from llama_index.core.bridge.pydantic import Field
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
except ImportError as exc:  # the extra is not installed
    raise ImportError("mixpr.integrations.llama_index needs llama-index-core: "
                      "pip install 'mixpr-gateway[llama-index]'") from exc  # fmt: skip

from mixpr.engine import ROUTES
from mixpr.integrations.passages import keep_best

__all__ = ["MixPRNodePostprocessor"]

_KEY = "mixpr"


class MixPRNodePostprocessor(BaseNodePostprocessor):
    """Keep the retrieved nodes' best chunks for the query within ``budget_tokens``."""

    budget_tokens: int = Field(default=1000, gt=0, description="tokens kept across all the nodes")
    route: str = Field(default="heuristic", description=f"MixPR's route: one of {', '.join(ROUTES)}")
    model: str | None = Field(default=None, description="the model whose tiktoken encoding counts tokens")

    @classmethod
    def class_name(cls) -> str:
        return "MixPRNodePostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if not nodes:
            return []
        if query_bundle is None:
            raise ValueError("MixPRNodePostprocessor needs the query (query_bundle or query_str)")
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        kept = keep_best(texts, query_bundle.query_str, budget_tokens=self.budget_tokens, route=self.route,
                         model=self.model)  # fmt: skip
        return [
            _with_text(n, part) if text else n  # no text (an image, metadata only): as it came
            for n, text, part in zip(nodes, texts, kept, strict=True)
            if part.spans or not text
        ]


def _with_text(found: NodeWithScore, part) -> NodeWithScore:
    node = found.node.model_copy(deep=True)
    node.set_content(part.text)
    node.metadata[_KEY] = part.metadata()
    for excluded in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
        if _KEY not in excluded:
            excluded.append(_KEY)
    return NodeWithScore(node=node, score=found.score)
