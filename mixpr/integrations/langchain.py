"""MixPR as a LangChain document compressor (``pip install 'mixpr-gateway[langchain]'``).

    from langchain_classic.retrievers import ContextualCompressionRetriever
    from mixpr.integrations.langchain import MixPRCompressor

    retriever = ContextualCompressionRetriever(
        base_compressor=MixPRCompressor(budget_tokens=1000), base_retriever=vector_store.as_retriever())

The retrieved documents are ranked together, chunk by chunk, against the query; the best chunks are
kept within ``budget_tokens`` (in all), each document's in its order. A document with nothing kept
is dropped, an empty one (an image's, a metadata-only one) comes back untouched; the others keep their
order and metadata, and ``metadata["mixpr"]`` says what was cut:
``kept_spans`` (character spans of the original ``page_content``), ``original_tokens``,
``kept_tokens`` and ``cut``. CPU only, no model; the async path runs it in a thread.
"""

from __future__ import annotations

from collections.abc import Sequence

try:
    from langchain_core.callbacks import Callbacks
    from langchain_core.documents import BaseDocumentCompressor, Document
except ImportError as exc:  # the extra is not installed
    raise ImportError("mixpr.integrations.langchain needs langchain-core: "
                      "pip install 'mixpr-gateway[langchain]'") from exc  # fmt: skip
from pydantic import Field

from mixpr.engine import ROUTES
from mixpr.integrations.passages import keep_best

__all__ = ["MixPRCompressor"]


class MixPRCompressor(BaseDocumentCompressor):
    """Keep the retrieved documents' best chunks for the query within ``budget_tokens``."""

    budget_tokens: int = Field(default=1000, gt=0, description="tokens kept across all the documents")
    route: str = Field(default="heuristic", description=f"MixPR's route: one of {', '.join(ROUTES)}")
    model: str | None = Field(default=None, description="the model whose tiktoken encoding counts tokens")

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """The documents' kept parts, in order; documents with nothing kept are left out, empty ones kept."""
        if not documents:
            return []
        kept = keep_best([d.page_content for d in documents], query, budget_tokens=self.budget_tokens,
                         route=self.route, model=self.model)  # fmt: skip
        return [
            doc if not doc.page_content else  # nothing to cut, nothing to cost: as it came
            Document(page_content=part.text, metadata={**doc.metadata, "mixpr": part.metadata()}, id=doc.id)
            for doc, part in zip(documents, kept, strict=True)
            if part.spans or not doc.page_content
        ]  # fmt: skip
