"""Where the question is: which chunks personalise the local walk (and are always kept).

The paper personalises on the last chunk (the last two when the last is an answer prefix
such as "Answer:"). A real question is often longer than one chunk: a contract question
("Highlight the parts ... related to "Renewal Term" ... Details: What is the renewal term
...?") is two or three sentences, and its last sentence alone misses the clause's name. So
the query is the whole question when we know where it is:

- the caller's ``query_span`` (character offsets, e.g. the gateway's last user message), or
- the text's trailing paragraph, when the text ends with one after a blank line (a user
  pastes a document, a blank line, then asks),

at most ``MAX_QUERY_CHUNKS`` chunks either way; otherwise the paper's rule.

A label that opens the question ("Question: Where is the apple?", "Q: ...", "Query: ...") is the
prompt's format, not what is asked: ``unlabelled`` leaves its word out of the question's counts.
Counted, it tied the question to every sentence of a long text that says "question": at 1M tokens of
books, ~40 of them outranked the second fact of a two-hop bAbI question in the walk, so a 4,000-token
budget lost it (bench/README.md). Only a word that carries no content is a label: one of
``CONTENTLESS_LABELS``, or the word the text itself opens other chunks with ("Caroline: " in a chat
asked as Caroline). "Kubernetes: why ...", "KeyError: 'x' ..." open with the very term asked about.
"""

from __future__ import annotations

import re

import numpy as np

from mixpr.chunking import Chunks

# A question longer than this is not a question but a document; personalising on (and
# pinning) all of it would spend the budget on the question itself.
MAX_QUERY_CHUNKS = 8
# The paper's rule: a last chunk of fewer words is an answer prefix, so the one before joins it.
SHORT_QUERY_WORDS = 3
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
# A trailing paragraph of at most MAX_QUERY_CHUNKS chunks fits in this many characters
# (chunks are cut at 400), so the search for it never scans a 1M-token text.
_TAIL_CHARS = 4 * 1024
# One capitalised word and a colon at the question's start (a speaker label of several words, as
# in "Lynne Neagle AM: ", names someone and stays).
_LABEL = re.compile(r"[ \t]*([A-Z][\w'-]*):[ \t]+(?=\S)")
# Words that name a prompt's parts, never what is asked (compared lowercased).
CONTENTLESS_LABELS = frozenset({
    "q", "question", "questions", "query", "a", "answer", "context", "task", "instruction",
    "instructions", "prompt", "input", "request", "details", "note", "problem", "user", "human",
    "assistant",
})


def query_chunks(chunks: Chunks, query_span: tuple[int, int] | None = None) -> np.ndarray:
    """Indices of the query's chunks, in order (empty only when there are no chunks)."""
    n = len(chunks)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if query_span is not None:
        picked = _overlapping(chunks, *query_span)[-MAX_QUERY_CHUNKS:]
    else:
        picked = _trailing_paragraph(chunks)
    if len(picked) == 0:
        picked = np.array([n - 1])
    if chunks.words[picked].sum() < SHORT_QUERY_WORDS and picked[0] > 0:
        picked = np.concatenate(([picked[0] - 1], picked))
    return picked


def _overlapping(chunks: Chunks, start: int, end: int) -> np.ndarray:
    """Chunks that share a character with ``[start, end)`` (chunks are sorted and disjoint)."""
    lo = np.searchsorted(chunks.ends, start, side="right")
    hi = np.searchsorted(chunks.starts, end, side="left")
    return np.arange(lo, max(lo, hi))


def _trailing_paragraph(chunks: Chunks) -> np.ndarray:
    """Chunks after the text's last blank line, if they are few; else none."""
    text = chunks.text
    end = len(text.rstrip())
    tail_start = max(0, end - _TAIL_CHARS)
    last = None
    for match in _BLANK_LINE.finditer(text, tail_start, end):
        last = match
    if last is None:
        return np.zeros(0, dtype=np.int64)
    first = np.searchsorted(chunks.starts, last.end())
    if len(chunks) - first > MAX_QUERY_CHUNKS:
        return np.zeros(0, dtype=np.int64)
    return np.arange(first, len(chunks))


def first_line(chunks: Chunks) -> np.ndarray:
    """Chunks of the text's first line when it has at most ``MAX_QUERY_CHUNKS``, else none.

    An instruction set on its own line at the top ("Summarize the following:") is the other
    place a request sits; a first line that runs on is the document itself."""
    text = chunks.text
    newline = text.find("\n", 0, _TAIL_CHARS)
    if newline < 0:
        return np.zeros(0, dtype=np.int64)
    last = np.searchsorted(chunks.starts, newline)
    return np.arange(min(last, len(chunks))) if last <= MAX_QUERY_CHUNKS else np.zeros(0, dtype=np.int64)


def query_weights(chunks: Chunks, query_span: tuple[int, int] | None = None) -> np.ndarray:
    """Personalisation vector p: uniform over the query's chunks, zero elsewhere."""
    p = np.zeros(len(chunks))
    picked = query_chunks(chunks, query_span)
    p[picked] = 1.0 / max(1, len(picked))
    return p


def unlabelled(texts: list[str], p: np.ndarray) -> list[str]:
    """``texts`` (the chunks' texts) with the label opening the question blanked out, if any."""
    asked = np.flatnonzero(p)
    if len(asked) == 0:
        return texts
    first = int(asked[0])
    label = _LABEL.match(texts[first])
    if label is None or not _contentless(label.group(1), texts, first):
        return texts
    return [*texts[:first], " " * label.end() + texts[first][label.end() :], *texts[first + 1 :]]


def _contentless(word: str, texts: list[str], first: int) -> bool:
    """Whether ``word`` (a label opening chunk ``first``) is a prompt's part name, or a label the
    text opens another chunk with (one pass over the chunk starts, and only for a word not listed)."""
    if word.lower() in CONTENTLESS_LABELS:
        return True
    same = re.compile(rf"[ \t]*{re.escape(word)}:[ \t]")
    return any(same.match(text) for i, text in enumerate(texts) if i != first)


def query_text(chunks: Chunks, p: np.ndarray) -> str:
    """The text of the query's chunks (those ``p`` personalises on)."""
    return " ".join(chunks.text[chunks.starts[i] : chunks.ends[i]] for i in np.flatnonzero(p).tolist())
