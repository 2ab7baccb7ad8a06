"""MixPR inside the pipelines that compress retrieved context today, as optional extras.

- ``mixpr.integrations.langchain.MixPRCompressor``: a LangChain ``BaseDocumentCompressor``
  (``pip install 'mixpr-gateway[langchain]'``), e.g. in a ``ContextualCompressionRetriever``.
- ``mixpr.integrations.llama_index.MixPRNodePostprocessor``: a LlamaIndex ``BaseNodePostprocessor``
  (``pip install 'mixpr-gateway[llama-index]'``), e.g. in a query engine's ``node_postprocessors``.

Importing this package imports neither framework; each module needs only its own.
"""
