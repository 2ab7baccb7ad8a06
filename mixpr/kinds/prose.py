"""Prose: sentences, as ``mixpr.chunking.chunk_text`` cuts them today (a line of a list is a sentence)."""

from __future__ import annotations

import numpy as np

from mixpr.chunking import chunk_text
from mixpr.kinds import lines as ln


def split(text: str, source: str | None = None) -> ln.Blocks:
    chunks = chunk_text(text)
    newlines = np.flatnonzero(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32) == 10)
    first = np.searchsorted(newlines, chunks.starts) + 1
    last = np.searchsorted(newlines, np.maximum(chunks.ends - 1, chunks.starts)) + 1
    pinned = np.zeros(len(chunks), dtype=np.int8)
    return ln.Blocks(text, chunks.starts, chunks.ends, first, last, pinned, path=source,
                     labels=[""] * len(chunks))  # fmt: skip
