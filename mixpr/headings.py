"""A block's heading belongs to every chunk of the block.

A block is the run of chunks from one ``BLOCK`` opening (a blank line, a message boundary, the
text's start) to the next; its heading is its first line when that line is short (at most
``MAX_HEADING_WORDS`` words), does not end like a sentence, and the block goes on after it.
A Wikipedia paragraph's title ("Tata Consultancy Services") names what its later sentences only
call "it" or "the company"; a chat session's date line ("DATE: 8 May, 2023") dates every turn
under it. So each chunk of the block also counts the heading's words, at ``HEADING_WEIGHT`` of
a word of its own, before the chunks are weighted (BM25) and linked: a question naming the
title meets those sentences, and a sentence naming the title meets its paragraph in the graph.
One sparse product; the loop over blocks is the only per-block Python work.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mixpr.chunking import BLOCK, Chunks

MAX_HEADING_WORDS = 12
HEADING_WEIGHT = 0.5


def heading_texts(chunks: Chunks) -> tuple[list[str], np.ndarray]:
    """The headings' texts, and for each chunk the index of its block's heading (-1: none, or the
    chunk holds the heading itself)."""
    text, starts = chunks.text, chunks.starts
    firsts = np.flatnonzero(chunks.levels >= BLOCK)
    ends = np.append(firsts[1:], len(chunks))
    texts: list[str] = []
    owner = np.full(len(chunks), -1, dtype=np.int64)
    for first, end in zip(firsts.tolist(), ends.tolist(), strict=True):
        line_end = text.find("\n", int(starts[first]), int(chunks.ends[end - 1]))
        if line_end < 0 or not _is_heading(text[starts[first] : line_end]):
            continue
        owner[first:end] = len(texts)
        owner[first : np.searchsorted(starts, line_end, side="right")] = -1  # it holds its own words
        texts.append(text[starts[first] : line_end])
    return texts, owner


def _is_heading(line: str) -> bool:
    """Short, and not ending like a sentence: a title or a date line, not a chat's first turn."""
    line = line.rstrip()
    return len(line.split()) <= MAX_HEADING_WORDS and not line.endswith((".", "!", "?"))


def with_headings(counts: sp.csr_matrix, heading_counts: sp.csr_matrix, owner: np.ndarray) -> sp.csr_matrix:
    """``counts`` plus ``HEADING_WEIGHT`` × the counts of each chunk's heading (rows of the heads)."""
    rows = np.flatnonzero(owner >= 0)
    if len(rows) == 0:
        return counts
    pick = sp.csr_matrix(
        (np.full(len(rows), HEADING_WEIGHT), (rows, owner[rows])),
        shape=(counts.shape[0], heading_counts.shape[0]),
    )
    return (counts + pick @ heading_counts).tocsr()
