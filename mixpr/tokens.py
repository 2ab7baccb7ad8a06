"""Offline tiktoken encodings, chosen by model name.

tiktoken downloads its BPE files on first use, which fails on machines without internet. So
before tiktoken loads anything, ``TIKTOKEN_CACHE_DIR`` (when the caller has not set it) points at
a local copy: LiteLLM's, when LiteLLM is installed (the gateway: it also has p50k_base), else the
library's own (``mixpr/tokenizers/``: cl100k_base and o200k_base, the encodings of every current
OpenAI model and the default for the rest). We locate LiteLLM's folder without importing it.
An older encoding (r50k_base, p50k_base without LiteLLM) is still downloaded by tiktoken on first use.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

# Named as tiktoken's cache names them: the SHA-1 of the file's download address.
BUNDLED = Path(__file__).resolve().parent / "tokenizers"


def _litellm_tokenizers_dir() -> str | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return str(folder) if folder.is_dir() else None


if "TIKTOKEN_CACHE_DIR" not in os.environ:
    os.environ["TIKTOKEN_CACHE_DIR"] = _litellm_tokenizers_dir() or str(BUNDLED)

import tiktoken  # noqa: E402  (must load after TIKTOKEN_CACHE_DIR is set)

DEFAULT_ENCODING = "cl100k_base"


@functools.lru_cache(maxsize=64)
def encoding_for(model: str | None) -> tiktoken.Encoding:
    """The encoding tiktoken uses for ``model``; cl100k_base for names it does not know.

    Provider prefixes (``openai/gpt-4o``) are stripped first, as LiteLLM names carry them.
    """
    name = (model or "").rsplit("/", 1)[-1]
    try:
        return tiktoken.encoding_for_model(name)
    except KeyError:
        return tiktoken.get_encoding(DEFAULT_ENCODING)


def has_encoding(model: str | None) -> bool:
    """Whether tiktoken knows ``model`` (an OpenAI model), so that its counts are the model's own."""
    try:
        tiktoken.encoding_for_model((model or "").rsplit("/", 1)[-1])
    except KeyError:
        return False
    return True


def count_tokens(text: str, model: str | None = None) -> int:
    """Exact token count of ``text`` for ``model`` (special tokens counted as plain text)."""
    return len(encoding_for(model).encode_ordinary(text))
