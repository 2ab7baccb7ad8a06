"""Offline tiktoken encodings, chosen by model name, without touching the host's environment.

tiktoken downloads its BPE files on first use, which fails on machines without internet. The wheel
ships two (``mixpr/tokenizers/``: cl100k_base and o200k_base, the encodings of every current OpenAI
model and the default for the rest) and builds them from those files with tiktoken's own ``Encoding``
constructor, checking each file's SHA-256 as tiktoken does. ``os.environ`` is never written: a library
that set ``TIKTOKEN_CACHE_DIR`` would move every other tiktoken user in the process.

When the host has set ``TIKTOKEN_CACHE_DIR`` itself (the gateway points it at LiteLLM's copy, and LiteLLM
sets it as it loads), tiktoken loads every encoding as it always does, from that folder, and the host's
other users share them. Any other encoding (r50k_base, p50k_base) is tiktoken's alone: from the host's
folder, or downloaded once.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import tiktoken
from tiktoken.model import encoding_name_for_model

# Named as tiktoken's cache names them: the SHA-1 of the file's download address.
BUNDLED = Path(__file__).resolve().parent / "tokenizers"
DEFAULT_ENCODING = "cl100k_base"

_ENDOFTEXT, _ENDOFPROMPT = "<|endoftext|>", "<|endofprompt|>"
_FIM_PREFIX, _FIM_MIDDLE, _FIM_SUFFIX = "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"


@dataclass(frozen=True)
class _Bundled:
    """What tiktoken's own constructor (``tiktoken_ext.openai_public``) gives for an encoding, with the
    bundled file in place of its download (``test_tokens`` checks both build the same encoding)."""

    file: str
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


_BUNDLED = {
    "cl100k_base": _Bundled(
        "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        {_ENDOFTEXT: 100257, _FIM_PREFIX: 100258, _FIM_MIDDLE: 100259, _FIM_SUFFIX: 100260,
         _ENDOFPROMPT: 100276},
    ),
    "o200k_base": _Bundled(
        "fb374d419588a4632f3f557e76b4b70aebbca790",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "|".join([
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]),
        {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
}  # fmt: skip


_LOADED: dict[str, tiktoken.Encoding] = {}
_LOADING: dict[str, threading.Lock] = {}


def encoding_named(name: str) -> tiktoken.Encoding:
    """The encoding ``name``: from the wheel's file unless the host chose tiktoken's folder. Loaded
    once per process (about half a second of CPU), however many threads ask for it at once: the
    others wait for that load rather than making their own beside it."""
    encoding = _LOADED.get(name)
    if encoding is None:
        with _LOADING.setdefault(name, threading.Lock()):
            encoding = _LOADED.get(name)
            if encoding is None:
                encoding = _LOADED[name] = _load(name)
    return encoding


def is_loaded(model: str | None) -> bool:
    """Whether ``model``'s encoding is loaded in this process, so that counting a short text takes
    microseconds (the first count loads the encoding first)."""
    return (_name(model) or DEFAULT_ENCODING) in _LOADED


def _load(name: str) -> tiktoken.Encoding:
    if name not in _BUNDLED or "TIKTOKEN_CACHE_DIR" in os.environ:
        return tiktoken.get_encoding(name)
    return from_bundled_file(name)


def from_bundled_file(name: str) -> tiktoken.Encoding:
    """cl100k_base or o200k_base, built from the wheel's file."""
    bundled = _BUNDLED[name]
    ranks = _ranks(BUNDLED / bundled.file, bundled.sha256)
    return tiktoken.Encoding(name, pat_str=bundled.pat_str, mergeable_ranks=ranks,
                             special_tokens=bundled.special_tokens)  # fmt: skip


def _ranks(path: Path, sha256: str) -> dict[bytes, int]:
    """A ``.tiktoken`` file's ranks (one base64 token and its rank a line), as ``load_tiktoken_bpe``
    reads them, with no cache folder to consult or fill."""
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{path} is not the encoding tiktoken publishes (SHA-256 mismatch)")
    pairs = (line.split() for line in data.splitlines() if line)
    return {base64.b64decode(token): int(rank) for token, rank in pairs}


def _name(model: str | None) -> str | None:
    """The encoding tiktoken names for ``model`` (provider prefix stripped), or None."""
    try:
        return encoding_name_for_model((model or "").rsplit("/", 1)[-1])
    except KeyError:
        return None


@functools.lru_cache(maxsize=64)
def encoding_for(model: str | None) -> tiktoken.Encoding:
    """The encoding tiktoken uses for ``model``; cl100k_base for names it does not know.

    Provider prefixes (``openai/gpt-4o``) are stripped first, as LiteLLM names carry them.
    """
    return encoding_named(_name(model) or DEFAULT_ENCODING)


def has_encoding(model: str | None) -> bool:
    """Whether tiktoken knows ``model`` (an OpenAI model), so that its counts are the model's own."""
    return _name(model) is not None


def count_tokens(text: str, model: str | None = None) -> int:
    """Exact token count of ``text`` for ``model`` (special tokens counted as plain text)."""
    return len(encoding_for(model).encode_ordinary(text))
