"""A LoCoMo chat sent as OpenAI messages, the way a client replaying it would (issue #17).

``bench.real_sets``' ``locomo-messages`` set. Each line of the chat becomes one message: a turn
("Caroline: Hey Mel!") keeps its speaker label, as LoCoMo's own clients prompt with it, and its
role alternates by speaker (the chat's first speaker is ``user``, the other ``assistant``); a
session's "DATE: …" line is a ``user`` message of its own, as a client that marks each session's
start sends it; the question is the last ``user`` message. The messages go through the gateway's
``gateway.compress.conversation.split``, and the evidence turns' spans are mapped onto its stream, so a
compressor is scored on exactly what the gateway hands MixPR (boundaries and query span included).
Message framing tokens are not counted: both forms get the same budget for their text.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from gateway.compress import conversation

DATE = "DATE:"


@dataclass(frozen=True)
class Sent:
    """The stream the gateway builds, its message boundaries, the question's span, the evidence spans."""

    text: str
    boundaries: tuple[int, ...]
    query_span: tuple[int, int] | None
    evidence: tuple[tuple[int, int], ...]


def messages(chat: str, question: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The chat's turns and date lines as messages, then the question; and where each one starts.

    A turn runs from a line opening with one of the chat's two speakers' labels to the next such line
    or date line (a few turns hold a newline); blank lines between sessions are not sent."""
    labels = Counter(_label(line) for line in chat.split("\n"))
    speakers = [name for name, _ in labels.most_common(3) if name][:2]
    sent: list[dict[str, Any]] = []
    starts: list[int] = []
    at = 0
    for line in chat.split("\n"):
        if line.startswith(DATE) or _label(line) in speakers or not sent:
            sent.append({"role": _role(line, speakers), "content": line})
            starts.append(at)
        elif line.strip():
            sent[-1]["content"] += "\n" + line
        at += len(line) + 1
    for message in sent:
        message["content"] = message["content"].rstrip()
    sent.append({"role": "user", "content": question.strip()})
    return sent, starts


def _label(line: str) -> str:
    """The speaker label a line opens with ("" for none or a date line)."""
    name, colon, _ = line.partition(": ")
    return name if colon and not line.startswith(DATE) and 0 < len(name.split()) <= 4 else ""


def _role(line: str, speakers: list[str]) -> str:
    """The first speaker is the user, the second the assistant; a date line is the user's."""
    label = _label(line)
    return "assistant" if label and speakers.index(label) == 1 else "user"


def send(chat: str, question: str, evidence: list[list[int]]) -> Sent:
    """``chat`` and ``question`` as the gateway's stream, ``evidence`` (spans in ``chat``) moved onto it."""
    sent, starts = messages(chat, question)
    conv = conversation.split(sent)
    where = {p.message: p.start for p in conv.pieces}
    moved = []
    for a, b in evidence:
        line = max(i for i, s in enumerate(starts) if s <= a)
        moved.append((where[line] + a - starts[line], where[line] + b - starts[line]))
    return Sent(conv.text, conv.boundaries, conv.query_span, tuple(moved))
