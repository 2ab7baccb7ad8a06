"""Identifier-aware word counts: what agents reuse from tool outputs are identifiers and paths.

A token is a run of word characters (``get_form``, ``StreamReadConstraints``, ``test_base``); each
also counts its parts, split at underscores, camel humps and digits (``get``, ``form``; ``stream``,
``read``, ``constraints``), so "read constraints" in a task meets ``StreamReadConstraints`` in a file
view while the whole identifier stays the strongest (rarest) match. Paths split at ``/`` and ``.`` into
their components the same way. One regex pass over the joined texts; splitting is cached per distinct
token, so the work is linear in the text.
"""

from __future__ import annotations

import re

import numpy as np
import scipy.sparse as sp

_SEP = "\x00"
_TOKENS = re.compile(r"\x00|[^\W_][\w]*|_+[^\W_]\w*")
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+|[^\W\d_A-Za-z]+")
MIN_CHARS = 2


def counts_and_words(texts: list[str], extra: str = "") -> tuple[sp.csr_matrix, list[str], np.ndarray]:
    """Counts of the tokens and their parts, one row per text; the columns' words; and the counts of
    ``extra`` (a query outside the texts) over the same columns (its words absent from the texts have
    columns no text row counts, so they weigh nothing)."""
    joined = _SEP.join(t.replace(_SEP, " ") for t in [*texts, extra])
    vocabulary: dict[str, int] = {}
    parts_of: dict[str, list[int]] = {}
    rows, columns = [], []
    row = 0
    for token in _TOKENS.findall(joined):
        if token == _SEP:
            row += 1
            continue
        ids = parts_of.get(token)
        if ids is None:
            ids = parts_of[token] = [vocabulary.setdefault(w, len(vocabulary)) for w in terms(token)]
        rows += [row] * len(ids)
        columns += ids
    shape = (len(texts) + 1, len(vocabulary))
    data = np.ones(len(columns), dtype=np.float32)
    where = (np.asarray(rows, dtype=np.int64), np.asarray(columns, dtype=np.int64))
    counts = sp.csr_matrix((data, where), shape=shape)
    counts.sum_duplicates()
    query = np.asarray(counts[len(texts)].todense()).ravel()
    return counts[: len(texts)].tocsr(), list(vocabulary), query


def terms(token: str) -> list[str]:
    """The token (lower-cased) and, when it is compound, its parts of at least ``MIN_CHARS`` characters."""
    whole = token.lower().strip("_")
    if len(whole) < MIN_CHARS:
        return []
    parts = [p.lower() for p in _PARTS.findall(token)]
    if len(parts) <= 1:
        return [whole]
    return [whole, *dict.fromkeys(p for p in parts if len(p) >= MIN_CHARS and p != whole)]
