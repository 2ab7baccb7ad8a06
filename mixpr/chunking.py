"""Text -> chunks with exact character spans (the MixPR paper's chunker).

Sentences first; a sentence over ``max_words`` words is split on newlines, and
a line still over ``max_words`` into near-equal runs of words. Spans index the
original text, so kept chunks are rebuilt byte-for-byte (whitespace included).

Tiny-chunk floods: an inline list such as ``1. apple 2. pear ...`` would become
one two-word "sentence" per item if every period ended a sentence. We do not
end a sentence after a 1-3 digit enumerator or inside ``...``, and we require the
next sentence to start with something other than a lowercase letter, so such
lists stay whole and are cut into 32-word runs instead. Newline-separated lists
keep one chunk per line on purpose: lines are the natural units of code, logs
and key-value dumps (Hash-Hop), and merging unrelated lines blurs the graph.
``bench/speed.py`` reports the chunk counts of both kinds of flood.

Tool outputs (code views, logs, JSON, grep output, diffs) are cut by ``mixpr.kinds`` instead, one
module per kind, into blocks of whole lines (``compress(kind=...)``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

MAX_WORDS = 32
CONTINUES, SENTENCE, LINE, TURN, BLOCK = 0, 1, 2, 3, 4
# A chat turn's speaker label at a line's start: one to four capitalised words and a colon
# ("Caroline: ", "USER: ", "Lynne Neagle AM: ").
# Searched after each newline (a literal the regex engine skips to; "^" with re.MULTILINE tries every
# position, 24 ms on a 1M-token book), and once at the text's start.
_SPEAKER = re.compile(r"\n[ \t]*([A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,3}: )")
_FIRST_SPEAKER = re.compile(r"[ \t]*([A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,3}: )")
# A chunk this long in characters is split even when it has few spaces
# (minified JSON, base64, languages written without spaces).
MAX_CHARS = 400

# Every branch starts at one terminator character, so the regex engine can skip
# ahead to candidates with a fast scan (10x faster than leading lookbehinds).
_SENTENCE_END = re.compile(
    r"[.!?。！？\n](?:"
    r"(?<=[.!?])(?<!\.\.)(?<!\s\d\.)(?<!\s\d\d\.)(?<!\s\d\d\d\.)(?!\.)[\"'”’)\]]*\s+(?=[^\sa-z])"
    r"|(?<=[。！？])\s*"
    r"|(?<=\n)[ \t]*\n\s*)"
)
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Chunks:
    """Chunk spans of ``text``: chunk i is ``text[starts[i]:ends[i]]``, in order.

    ``opens[i]`` is False when chunk i continues the line or sentence of chunk i-1 (it was cut
    only for length), True when it starts a sentence, a line or a piece between boundaries.
    ``levels[i]`` says how much chunk i opens: ``CONTINUES`` (0), ``SENTENCE``, ``LINE`` (a newline
    just before it), ``TURN`` (a line opening with a speaker label, "Caroline: ") or ``BLOCK`` (a
    blank line, a boundary or the text's start just before it): the units a question's evidence
    comes in (a chat turn, a message, a paragraph under its title).
    ``word_starts`` and ``newline_ends``: where in ``text`` words start and lines end (just past each
    newline), sorted, kept from chunking so later steps find lines without another pass over the text.
    """

    text: str
    starts: np.ndarray
    ends: np.ndarray
    words: np.ndarray
    opens: np.ndarray
    levels: np.ndarray
    word_starts: np.ndarray = field(repr=False, compare=False)
    newline_ends: np.ndarray = field(repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.starts)

    def texts(self) -> list[str]:
        text = self.text
        return [text[s:e] for s, e in zip(self.starts.tolist(), self.ends.tolist(), strict=True)]


def chunk_text(
    text: str, *, max_words: int = MAX_WORDS, max_chars: int = MAX_CHARS, boundaries: Iterable[int] = ()
) -> Chunks:
    """Split ``text`` into chunks; no chunk crosses an offset in ``boundaries``.

    Vectorised over code points: a Python loop over sentences costs more than
    the rest of the pipeline on a 1M-token text.
    """
    layout = _Layout(text)
    sentence_ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    cuts = _merge([0, len(text)], sentence_ends, [b for b in boundaries if 0 < b < len(text)])
    cuts = _merge(cuts, _cuts_inside_long(cuts, layout.newline_ends, layout, max_words, max_chars))
    units = cuts  # sentences and lines: what later cuts split only for length
    cuts = _merge(cuts, _word_run_cuts(cuts, layout, max_words))
    cuts = _merge(cuts, _char_run_cuts(cuts, max_chars))
    starts, ends = cuts[:-1], cuts[1:]
    words = layout.words_between(starts, ends)
    keep = words > 0  # whitespace-only pieces hold nothing to retrieve
    starts = starts[keep]
    at = np.minimum(np.searchsorted(units, starts), len(units) - 1)  # both sorted: a binary search
    opens = units[at] == starts
    levels = _levels(text, layout, starts, opens, boundaries)
    return Chunks(
        text, starts, ends[keep], words[keep], opens, levels, layout.word_starts, layout.newline_ends
    )


def _levels(text: str, layout: _Layout, starts: np.ndarray, opens: np.ndarray, boundaries) -> np.ndarray:
    """CONTINUES / SENTENCE / LINE / TURN / BLOCK for each chunk start (see ``Chunks``)."""
    levels = opens.astype(np.int8)
    line = opens & layout.after_newlines(starts, 1)
    levels[line] = LINE
    first = _FIRST_SPEAKER.match(text)
    speakers = np.fromiter((m.start(1) for m in _SPEAKER.finditer(text)), np.int64)
    speakers = np.concatenate(([first.start(1)], speakers)) if first else speakers
    levels[line & np.isin(starts, speakers)] = TURN
    levels[opens & layout.after_newlines(starts, 2)] = BLOCK
    levels[np.isin(starts, np.fromiter(boundaries, np.int64))] = BLOCK
    levels[:1] = BLOCK
    return levels


class _Layout:
    """Where words start and lines end, as sorted offsets: counting is a binary search."""

    def __init__(self, text: str) -> None:
        codes = _code_points(text)
        # ASCII codes index the table directly; others are clipped to its last (non-space) entry.
        self.visible = ~_SPACE_TABLE[codes if codes.dtype == np.uint8 else np.minimum(codes, 0x3001)]
        self.starts_word = self.visible.copy()
        self.starts_word[1:] &= ~self.visible[:-1]
        self.word_starts = np.flatnonzero(self.starts_word)
        self.newline_ends = np.flatnonzero(codes == 10) + 1

    def after_newlines(self, offsets: np.ndarray, count: int) -> np.ndarray:
        """True where at least ``count`` newlines sit in the whitespace just before the offset."""
        at = np.searchsorted(self.newline_ends, offsets, side="right") - count
        found = at >= 0
        newline_end = self.newline_ends[np.maximum(at, 0)] if len(self.newline_ends) else offsets
        # No word starts between that newline and the offset: only whitespace lies between.
        return found & (self.word_index(offsets) == self.word_index(newline_end))

    def words_between(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Words in each span; a span that starts inside a word counts that word too."""
        inside = np.zeros(len(starts), dtype=np.int64)
        nonempty = starts < ends
        at = starts[nonempty]
        inside[nonempty] = self.visible[at] & ~self.starts_word[at]
        return self.word_index(ends) - self.word_index(starts) + inside

    def word_index(self, offsets: np.ndarray) -> np.ndarray:
        """How many words start before each offset."""
        return np.searchsorted(self.word_starts, offsets)


def _merge(*offsets) -> np.ndarray:
    """Sorted, distinct union of offset lists. Each input is sorted, and a stable
    sort (timsort) merges sorted runs in linear time, unlike np.union1d's quicksort."""
    merged = np.concatenate([np.asarray(o, dtype=np.int64) for o in offsets])
    merged.sort(kind="stable")
    return merged[np.concatenate(([True], merged[1:] != merged[:-1]))] if len(merged) else merged


def _code_points(text: str) -> np.ndarray:
    """One array element per character; one byte each for ASCII text (4x less memory)."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


# True for every code point str.isspace() accepts (all are below U+3001), so counts match str.split().
_SPACE_TABLE = np.array([chr(c).isspace() for c in range(0x3002)], dtype=bool)


def _long(cuts: np.ndarray, layout: _Layout, max_words: int, max_chars: int) -> np.ndarray:
    starts, ends = cuts[:-1], cuts[1:]
    return (layout.words_between(starts, ends) > max_words) | (ends - starts > max_chars)


def _cuts_inside_long(cuts, candidates, layout, max_words, max_chars) -> np.ndarray:
    """The candidate offsets that fall strictly inside an over-long piece."""
    piece = np.searchsorted(cuts, candidates, side="right") - 1
    inside = (piece >= 0) & (piece < len(cuts) - 1)
    inside[inside] &= candidates[inside] > cuts[piece[inside]]
    inside[inside] &= _long(cuts, layout, max_words, max_chars)[piece[inside]]
    return candidates[inside]


def _word_run_cuts(cuts: np.ndarray, layout: _Layout, max_words: int) -> np.ndarray:
    """Near-equal word runs for every piece (line) still over ``max_words``."""
    words = layout.words_between(cuts[:-1], cuts[1:])
    piece, share = _interior_cuts(-(-words // max_words))
    offset = np.floor(share * words[piece] + 0.5).astype(np.int64)
    return layout.word_starts[layout.word_index(cuts[piece]) + offset]


def _char_run_cuts(cuts: np.ndarray, max_chars: int) -> np.ndarray:
    """Near-equal character runs for pieces with few spaces but many characters."""
    lengths = np.diff(cuts)
    piece, share = _interior_cuts(-(-lengths // max_chars))
    return cuts[piece] + np.floor(share * lengths[piece] + 0.5).astype(np.int64)


def _interior_cuts(runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each piece split into ``runs[i]`` equal runs: its inner cuts as (piece, share of its length)."""
    pieces = np.flatnonzero(runs > 1)
    per_piece = runs[pieces] - 1
    piece = np.repeat(pieces, per_piece)
    step = np.arange(per_piece.sum()) - np.repeat(np.cumsum(per_piece) - per_piece, per_piece) + 1
    return piece, step / runs[piece]
