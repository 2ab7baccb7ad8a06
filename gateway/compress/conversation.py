"""OpenAI chat messages <-> one chronological text stream that MixPR can compress.

Only the text of user, assistant and tool messages enters the stream; system and developer
messages, images, audio, tool calls, names and ids never do, so they pass through untouched.
Each text piece remembers where it came from, so kept spans map back onto the same messages
and every message keeps its role and place.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.compress import messages as shape
from mixpr.tokens import count_tokens

SEPARATOR = "\n\n"  # between pieces: reads as a paragraph break to the chunker
DROPPED = "[…]"  # a piece with nothing kept: providers reject empty content, and the model sees a gap
VERBATIM_ROLES = frozenset({"system", "developer"})
# OpenAI's accounting: every message costs a few tokens of framing, every reply 3 of priming.
TOKENS_PER_MESSAGE = 4
TOKENS_PER_REPLY = 3
# Images and audio are billed by size, not by their base64 text; counting the base64 would
# trigger compression on every screenshot. A high-detail 1024x1024 image costs 765 tokens.
TOKENS_PER_MEDIA_PART = 765
# The question MixPR personalises on: the last user message's last paragraph, at most this
# many characters (about 500 tokens; MixPR takes at most 8 chunks of it anyway).
QUERY_MAX_CHARS = 2000


@dataclass(frozen=True)
class Piece:
    """A run of compressible text: ``messages[message]`` content (or its ``part``-th text part)."""

    message: int
    part: int | None
    start: int
    end: int


@dataclass(frozen=True)
class Conversation:
    messages: list[dict[str, Any]]
    text: str  # the compressible stream
    pieces: tuple[Piece, ...]
    verbatim_text: str  # everything else that is text and costs tokens (system, names, tool calls)
    media_parts: int

    @property
    def boundaries(self) -> tuple[int, ...]:
        """Where chunks must be cut: every piece's start and end."""
        return tuple(sorted({p.start for p in self.pieces} | {p.end for p in self.pieces}))

    @property
    def query_span(self) -> tuple[int, int] | None:
        """Where the question is in ``text``: the last paragraph of the last user message
        (``split`` puts it last), its tail if long; None when the stream does not end with one."""
        if not self.pieces or self.messages[self.pieces[-1].message].get("role") != "user":
            return None
        last, text = self.pieces[-1], self.text
        end = last.end
        while end > last.start and text[end - 1].isspace():
            end -= 1
        # Only the last QUERY_MAX_CHARS can be the query: never scan (or copy) the document before it.
        floor = max(last.start, end - QUERY_MAX_CHARS)
        blank = text.rfind("\n\n", floor, end)
        start = floor if blank < 0 else blank + 2
        start += len(text[start:end]) - len(text[start:end].lstrip())
        return (start, end) if start < end else None


def split(messages: Sequence[dict[str, Any]]) -> Conversation:
    """Lay the compressible text of ``messages`` out as one stream.

    The stream is chronological, except that the last user message goes last even when tool
    results follow it: MixPR treats the end of the stream as the query.
    """
    order = _stream_order(messages)
    texts: list[str] = []
    pieces: list[Piece] = []
    offset = 0
    for index in order:
        for part, text in _text_parts(messages[index]):
            if texts:
                offset += len(SEPARATOR)
            pieces.append(Piece(index, part, offset, offset + len(text)))
            texts.append(text)
            offset += len(text)
    verbatim, media = _verbatim(messages)
    return Conversation(list(messages), SEPARATOR.join(texts), tuple(pieces), verbatim, media)


def _stream_order(messages: Sequence[dict[str, Any]]) -> list[int]:
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    order = [i for i, m in enumerate(messages) if m.get("role") not in VERBATIM_ROLES]
    if users and users[-1] != order[-1]:
        order.remove(users[-1])
        order.append(users[-1])
    return order


def _text_parts(message: dict[str, Any]) -> list[tuple[int | None, str]]:
    if message.get("role") in VERBATIM_ROLES:
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [(None, content)] if content else []
    if isinstance(content, list):
        return [(i, p["text"]) for i, p in enumerate(content) if shape.is_text(p) and p["text"]]
    return []


def _verbatim(messages: Sequence[dict[str, Any]]) -> tuple[str, int]:
    """The text that stays as it is and still costs tokens, and the number of media parts."""
    texts: list[str] = []
    media = 0
    for message in messages:
        content = message.get("content")
        if message.get("role") in VERBATIM_ROLES:
            texts.append(content if isinstance(content, str) else json.dumps(content))
        elif isinstance(content, list):
            media += sum(1 for p in content if isinstance(p, dict) and p.get("type") != "text")
        for key in ("name", "tool_call_id"):
            if isinstance(message.get(key), str):
                texts.append(message[key])
        for key in ("tool_calls", "function_call"):
            if message.get(key):
                texts.append(json.dumps(message[key]))
    return "\n".join(texts), media


def never_cut(conv: Conversation, model: str | None) -> list[tuple[str, int]]:
    """What compression leaves whole, by kind, in tokens (the counts the 400 for a prompt that cannot
    fit names): system and developer messages, tool calls (with names and ids), images and audio,
    message framing, and the question (the newest user message's last paragraph, always kept)."""
    system = [m for m in conv.messages if m.get("role") in VERBATIM_ROLES]
    calls = [m for m in conv.messages if m.get("role") not in VERBATIM_ROLES]
    span = conv.query_span
    parts = [("system and developer messages", count_tokens(_verbatim(system)[0], model)),
             ("tool calls, names and ids", count_tokens(_verbatim(calls)[0], model)),
             ("images and audio", TOKENS_PER_MEDIA_PART * conv.media_parts),
             ("message framing", TOKENS_PER_MESSAGE * len(conv.messages) + TOKENS_PER_REPLY),
             ("the question", count_tokens(conv.text[span[0]:span[1]], model) if span else 0)]
    return [(name, tokens) for name, tokens in parts if tokens]


def overhead_tokens(conv: Conversation, model: str, tools: Any = None) -> int:
    """Framing, media and tool definitions: the fixed tokens other than the verbatim text."""
    tokens = TOKENS_PER_MESSAGE * len(conv.messages) + TOKENS_PER_REPLY
    tokens += TOKENS_PER_MEDIA_PART * conv.media_parts
    if tools:
        tokens += count_tokens(json.dumps(tools), model)
    return tokens


def rebuild(conv: Conversation, spans: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """The messages again, each text piece cut down to the parts of it inside ``spans``."""
    kept = _kept_runs(conv, spans)
    texts: dict[int, dict[int | None, str]] = {}
    for number, piece in enumerate(conv.pieces):
        texts.setdefault(piece.message, {})[piece.part] = _join(kept.get(number, []))
    # Copy on write: untouched messages stay the very objects the client sent. Each touched message
    # (and its list of parts) is copied once: a copy per part is quadratic in a message's parts.
    messages = list(conv.messages)
    for index, parts in texts.items():
        messages[index] = _with_texts(messages[index], parts)
    return messages


def _kept_runs(conv: Conversation, spans: Sequence[tuple[int, int]]) -> dict[int, list[str]]:
    """For each piece (by number), the runs of its text inside ``spans``."""
    kept: dict[int, list[str]] = {}
    starts = [p.start for p in conv.pieces]
    for start, end in spans:
        first = max(bisect.bisect_right(starts, start) - 1, 0)
        for number in range(first, len(conv.pieces)):
            piece = conv.pieces[number]
            if piece.start >= end:
                break
            lo, hi = max(start, piece.start), min(end, piece.end)
            if lo < hi:
                kept.setdefault(number, []).append(conv.text[lo:hi])
    return kept


def _join(parts: list[str]) -> str:
    """Kept runs of one piece; a space marks each cut unless whitespace already does."""
    if not parts:
        return DROPPED
    out = [parts[0]]
    for part in parts[1:]:
        if not (out[-1][-1:].isspace() or part[:1].isspace()):
            out.append(" ")
        out.append(part)
    return "".join(out)


def _with_texts(message: dict[str, Any], texts: dict[int | None, str]) -> dict[str, Any]:
    """A copy of ``message`` with its text content (None) or its text parts (by index) replaced."""
    copy = dict(message)
    if None in texts:
        copy["content"] = texts[None]
        return copy
    content = list(copy["content"])
    for part, text in texts.items():
        content[part] = {**content[part], "text": text}
    copy["content"] = content
    return copy
