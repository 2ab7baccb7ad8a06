"""Offline tiktoken encodings, chosen by model name.

tiktoken downloads its BPE files on first use, which fails on machines without
internet. litellm ships cl100k_base, o200k_base and p50k_base, so when
litellm is installed we point ``TIKTOKEN_CACHE_DIR`` at its copy before
tiktoken loads anything. We locate the folder without importing litellm.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path


def _litellm_tokenizers_dir() -> str | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return str(folder) if folder.is_dir() else None


if "TIKTOKEN_CACHE_DIR" not in os.environ:
    _folder = _litellm_tokenizers_dir()
    if _folder:
        os.environ["TIKTOKEN_CACHE_DIR"] = _folder

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
