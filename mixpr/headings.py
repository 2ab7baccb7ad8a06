"""A block's heading belongs to every chunk of the block.

A block is the run of chunks from one ``BLOCK`` opening (a blank line, a message boundary, the
text's start) to the next; its heading is its first line when that line is short (at most
``MAX_HEADING_WORDS`` words), does not end like a sentence, and the block goes on after it.
A Wikipedia paragraph's title ("Tata Consultancy Services") names what its later sentences only
call "it" or "the company"; a chat session's date line ("DATE: 8 May, 2023") dates every turn
under it. So each chunk of the block also counts the heading's words, at ``HEADING_WEIGHT`` of
a word of its own, before the chunks are weighted (BM25) and linked: a question naming the
title meets those sentences, and a sentence naming the title meets its paragraph in the graph.
One sparse product; finding the headings is vectorised (only short first lines are read as text).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from mixpr.chunking import BLOCK, Chunks

MAX_HEADING_WORDS = 12
HEADING_WEIGHT = 0.5


@dataclass(frozen=True)
class Titles:
    """The text's headings: ``firsts`` (each headed block's first chunk), ``texts``, ``owner`` (per chunk
    the heading it counts, -1: none or it holds the heading), ``under`` (per chunk its block's heading,
    the heading's own chunk included, -1: none)."""

    firsts: np.ndarray
    texts: list[str]
    owner: np.ndarray
    under: np.ndarray


def titles(chunks: Chunks) -> Titles:
    firsts, line_ends = headed_blocks(chunks)
    starts = chunks.starts
    texts = [chunks.text[a:b] for a, b in zip(starts[firsts].tolist(), line_ends.tolist(), strict=True)]
    heading = under(chunks, firsts)
    owner = heading.copy()
    has = np.flatnonzero(owner >= 0)
    owner[has[starts[has] <= line_ends[owner[has]]]] = -1  # it holds its own words
    return Titles(firsts, texts, owner, heading)


def heading_texts(chunks: Chunks) -> tuple[list[str], np.ndarray]:
    """The headings' texts, and for each chunk the index of its block's heading (-1: none, or the
    chunk holds the heading itself)."""
    found = titles(chunks)
    return found.texts, found.owner


def under(chunks: Chunks, firsts: np.ndarray) -> np.ndarray:
    """For each chunk, the index (in ``firsts``, the headed blocks' first chunks) of the heading its
    block opens with, the heading's own chunk included; -1 for a block without one."""
    block = np.cumsum(chunks.levels >= BLOCK) - 1  # chunk 0 always opens a block
    heading_of_block = np.full(block[-1] + 1 if len(block) else 0, -1, dtype=np.int64)
    heading_of_block[block[firsts]] = np.arange(len(firsts))
    return heading_of_block[block]


def headed_blocks(chunks: Chunks) -> tuple[np.ndarray, np.ndarray]:
    """The first chunk of each block that opens with a heading, and the offset of the newline ending
    that heading. Vectorised: a book of 15k paragraphs has no Python loop over them."""
    firsts = np.flatnonzero(chunks.levels >= BLOCK)
    newlines = chunks.newline_ends - 1
    if len(firsts) == 0 or len(newlines) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    start = chunks.starts[firsts]
    stop = chunks.ends[np.append(firsts[1:], len(chunks)) - 1]
    at = np.searchsorted(newlines, start)
    line_end = newlines[np.minimum(at, len(newlines) - 1)]
    words = np.searchsorted(chunks.word_starts, line_end) - np.searchsorted(chunks.word_starts, start)
    short = np.flatnonzero((at < len(newlines)) & (line_end < stop) & (words <= MAX_HEADING_WORDS))
    # Only the short first lines are read as text: is their end a sentence's?
    text = chunks.text
    open_ended = [not text[a:b].rstrip().endswith((".", "!", "?")) for a, b in zip(
        start[short].tolist(), line_end[short].tolist(), strict=True)]  # fmt: skip
    picked = short[np.array(open_ended, dtype=bool)] if len(short) else short
    return firsts[picked], line_end[picked]


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
