"""A text's words as integer ids in one vectorised pass, with no Python string per word.

The words are exactly ``re.findall(r"\\w\\w+|\\d", text)``'s: maximal runs of two or more word
characters (``str.isalnum()`` or "_", what ``re``'s ``\\w`` matches) and lone decimal digits (``\\d``).
On 1M tokens of book text that ``findall`` and a dict lookup per word took 0.27 s of CPU, as long as
tiktoken takes to count the text; here the code points are classified by a table, the runs found by
comparing neighbours, and each run hashed from prefix sums (numpy, a few passes over the text).

A word's id comes from a 64-bit polynomial hash of its code points and its length, mod 2^64 on
fixed-size blocks of the text (so the power tables stay small). Two distinct words share an id only
if their hashes collide: for the ~10^5 distinct words of a 10M-token text, a chance of about 10^-9.
Ids are numbered in order of first appearance, like a dict filled while reading the text.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

_BASE = 0x9E3779B97F4A7C15  # odd, so it has an inverse mod 2^64
_LENGTH_MIX = np.uint64(0xC2B2AE3D27D4EB4F)
_DIGEST_MIX = np.uint64(0xFF51AFD7ED558CCD)  # odd: the product's high half mixes every bit of a hash
_THREE_DIGITS = 1 << 21
_BLOCK = 1 << 18  # characters hashed per block: 2 MB per uint64 array
_ASCII_WORD = np.array([chr(c).isalnum() or c == ord("_") for c in range(128)] + [False])
_ASCII_DIGIT = np.array([chr(c).isdecimal() for c in range(128)] + [False])
_ASCII_LOWER = np.array([ord(chr(c).lower()) for c in range(128)], dtype=np.uint8)
_SIGMA = ord("Σ")
_SEP = "\x00"  # not a word character: no word runs from one text into the next


@dataclass(frozen=True)
class Words:
    """Word ``i`` is in text ``rows[i]`` and has id ``ids[i]``; ``vocabulary[id]`` is that word,
    lower-cased (ids in order of first appearance)."""

    rows: np.ndarray
    ids: np.ndarray
    vocabulary: list[str]


def find_words(texts: list[str]) -> Words:
    """The words of each of ``texts``, lower-cased, read in one pass over the texts joined."""
    joined = _SEP.join(texts)
    codes = _folded(joined)
    by_table = codes is not None
    if not by_table:  # lower-cased text by text, so the texts' lengths still place the words
        texts = [t.lower() for t in texts]
        joined = _SEP.join(texts)
        codes = _code_points(joined)
    starts, ends = _runs(codes)
    lone = ends - starts == 1
    keep = ~lone
    keep[lone] = _is_digit(codes[starts[lone]])
    starts, ends = starts[keep], ends[keep]
    ids, firsts = _number(_hashes(codes, starts, ends))
    spans = zip(starts[firsts].tolist(), ends[firsts].tolist(), strict=True)
    vocabulary = [joined[s:e].lower() if by_table else joined[s:e] for s, e in spans]
    # A separator sits after each text but the last; a word's row is how many lie before it.
    separators = np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)) + 1)[:-1] - 1
    return Words(np.searchsorted(separators, starts), ids, vocabulary)


def _code_points(text: str) -> np.ndarray:
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _folded(text: str) -> np.ndarray | None:
    """The code points of ``text.lower()`` when every character of ``text`` lower-cases to one
    character on its own, so that offsets stay; else None ("İ" -> "i̇"; a final sigma)."""
    codes = _code_points(text)
    if codes.dtype == np.uint8:
        return _ASCII_LOWER[codes]
    at = np.flatnonzero(codes >= 128)
    high = np.unique(codes[at]).tolist()
    lowered = [chr(c).lower() for c in high]
    if _SIGMA in high or any(len(low) != 1 for low in lowered):
        return None
    folded = _ASCII_LOWER[np.minimum(codes, 127)].astype(np.uint32)
    if high:
        folded[at] = np.asarray([ord(low) for low in lowered], np.uint32)[np.searchsorted(high, codes[at])]
    return folded


def _runs(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the maximal runs of word characters."""
    word = _is_word(codes)
    edges = np.flatnonzero(np.concatenate(([False], word)) != np.concatenate((word, [False])))
    return edges[::2], edges[1::2]


def _is_word(codes: np.ndarray) -> np.ndarray:
    return _classify(codes, _ASCII_WORD, lambda ch: ch.isalnum() or ch == "_")


def _is_digit(codes: np.ndarray) -> np.ndarray:
    return _classify(codes, _ASCII_DIGIT, str.isdecimal)


def _classify(codes: np.ndarray, ascii_table: np.ndarray, test) -> np.ndarray:
    """``test`` of each code point: a table lookup for ASCII, ``test`` once per distinct other one."""
    found = ascii_table[np.minimum(codes, 128)]
    if codes.dtype == np.uint8:
        return found
    high = np.flatnonzero(codes >= 128)
    if len(high):
        distinct = np.unique(codes[high])
        passing = distinct[np.fromiter((test(chr(c)) for c in distinct.tolist()), bool, len(distinct))]
        found[high] = np.isin(codes[high], passing)
    return found


def _hashes(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each word's hash: sum of code[k] * BASE^(k - start), plus its length mixed in, mod 2^64."""
    out = np.empty(len(starts), dtype=np.uint64)
    cuts = np.searchsorted(starts, np.arange(0, max(1, len(codes)), _BLOCK))
    for first, last in zip(cuts.tolist(), [*cuts[1:].tolist(), len(starts)], strict=True):
        if first < last:
            out[first:last] = _block_hashes(codes, starts[first:last], ends[first:last])
    return out + (ends - starts).astype(np.uint64) * _LENGTH_MIX


def _block_hashes(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    origin = int(starts[0])
    span = codes[origin : int(ends[-1])]
    powers, inverses = _powers(len(span))
    prefix = np.zeros(len(span) + 1, dtype=np.uint64)
    np.cumsum(span * powers[: len(span)], out=prefix[1:])
    return (prefix[ends - origin] - prefix[starts - origin]) * inverses[starts - origin]


def _powers(length: int) -> tuple[np.ndarray, np.ndarray]:
    """BASE^k and BASE^-k mod 2^64 for k < length. A block spans at most its own characters and its
    last word's: only a word longer than a block (a line of base64) needs tables made for it."""
    return _power_tables(2 * _BLOCK) if length <= 2 * _BLOCK else _power_tables.__wrapped__(length)


@functools.cache
def _power_tables(size: int) -> tuple[np.ndarray, np.ndarray]:
    tables = []
    for base in (_BASE, pow(_BASE, -1, 1 << 64)):
        table = np.full(size, base, dtype=np.uint64)
        table[0] = 1
        tables.append(np.cumprod(table, out=table))  # wraps mod 2^64, as wanted
    return tables[0], tables[1]


def _number(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ids by first appearance, and where each id first appears."""
    order = _grouped(hashes)
    ordered = hashes[order]
    opens = np.empty(len(order), dtype=bool)
    opens[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=opens[1:])
    group = np.cumsum(opens) - 1
    firsts = order[opens]  # a stable sort puts each group's earliest word first
    by_appearance = np.argsort(firsts, kind="stable")
    rank = np.empty(len(firsts), dtype=np.int64)
    rank[by_appearance] = np.arange(len(firsts))
    ids = np.empty(len(order), dtype=np.int64)
    ids[order] = rank[group]
    return ids, firsts[by_appearance]


def _grouped(hashes: np.ndarray) -> np.ndarray:
    """A stable order in which equal hashes are adjacent: stable sorts on 16-bit digits of a digest
    (numpy radix-sorts 16-bit keys), twice as fast as sorting the 64-bit hashes. Two digits up to
    2M words (two distinct words share them in ~1 text of 10 at 1M tokens), three beyond; when two
    distinct hashes share a digest, the full sort runs."""
    digits = 2 if len(hashes) < _THREE_DIGITS else 3
    digest = (hashes * _DIGEST_MIX) >> np.uint64(64 - 16 * digits)
    order = np.arange(len(hashes))
    for shift in range(0, 16 * digits, 16):
        digit = ((digest[order] >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
    ordered, keys = hashes[order], digest[order]
    same_key = keys[1:] == keys[:-1]
    if np.array_equal(ordered[1:][same_key], ordered[:-1][same_key]):
        return order
    return np.argsort(hashes, kind="stable")
