"""One multi-turn request as its build sees it: its pieces, their tokens and the forms found so far.

A pure record with the sums the scan and the assembly read (``size``, ``text``) and what a reset may
cut (``recuttable``, ``pool``, ``movable``). Built in the build thread (``gateway.conversation.history``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.compress import messages as shape
from gateway.compress.compressor import Router
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings
from gateway.conversation import forms, recut, resets


@dataclass(frozen=True)
class Request:
    """One request's fixed parts: everything its forms and resets depend on besides the messages."""

    messages: list[dict[str, Any]]
    tools: Any
    target: Target
    settings: MixprSettings
    control: Control
    router: Router | None
    more_evidence: float = 1.0  # Self-Route's retry: this many times the evidence, on the last message only
    conversation: bool = False  # per-message forms even without an assistant row (``/v1/compress``)
    cache_lifetime_s: float | None = None  # the provider's cache lifetime (``gateway.conversation.warmth``)


@dataclass
class Plan:
    """One request as the thread builds it."""

    request: Request
    pieces: list[forms.Piece]
    tokens: list[int]  # each piece's own tokens
    by_message: dict[int, list[int]]  # message -> its pieces (indices into ``pieces``)
    rest: list[int]  # each message's tokens besides its pieces (framing, names, calls, media)
    constant: int  # tools and the reply's priming
    salt: str
    cap: int  # the most one first-sight form keeps (``gateway.conversation.room``)
    # (piece, level) -> its form
    forms: dict[tuple[int, resets.Level], tuple[str, int]] = field(default_factory=dict)
    evidence: dict[int, tuple[str, int]] = field(default_factory=dict)  # follow-up piece -> its block
    new_forms: int = 0  # forms computed for this request (found neither in memory nor in Redis)
    failed: int = 0  # forms and evidence blocks the pool failed to compute (their pieces keep what they had)
    recuttable: list[int] = field(default_factory=list)  # the pieces a reset may cut
    cost_mode: bool = False  # a cost budget (a pasted document's form is its question's cut, at the cap)

    @property
    def over_document(self) -> bool:
        """A conversation over a pasted document: its first user message is over the cap. Decided once
        per conversation, from its first message, so what a reset keeps never changes with a later
        message (a tool result that switched it rewrote what earlier resets had kept)."""
        return self.pasted_over(self.cap)

    def pasted_over(self, tokens: int) -> bool:
        """Whether the first user message's own text is over ``tokens``."""
        first = min((p.message for p in self.pieces if p.role == "user"), default=-1)
        return any(p.question and p.message == first and t > tokens
                   for p, t in zip(self.pieces, self.tokens, strict=True))

    def size(self, message: int, level: resets.Level) -> int:
        """A message's tokens at ``level``."""
        return self.rest[message] + sum(self.piece_size(n, level) for n in self.by_message.get(message, ()))

    def piece_size(self, number: int, level: resets.Level) -> int:
        """A piece's tokens at ``level``: its form (or its text), and at first sight its evidence block."""
        form = self.forms.get((number, level))
        size = form[1] if form is not None else self.tokens[number]
        if level == resets.FIRST_SIGHT and number in self.evidence:
            size += self.evidence[number][1]
        return size

    def text(self, number: int, level: resets.Level) -> str:
        """What is sent for a piece at ``level``: its form (or its text), after its evidence block."""
        form = self.forms.get((number, level))
        text = form[0] if form is not None else self.pieces[number].text
        block = self.evidence.get(number, ("", 0))[0] if level == 0 else ""
        return f"{block}\n\n{text}" if block else text

    def may_cut(self, number: int, wide: bool = False) -> bool:
        """A piece a reset may cut: long text (a user message only when it does not fit whole);
        ``wide``: anything a placeholder shortens, when nothing else makes the request fit."""
        piece, tokens = self.pieces[number], self.tokens[number]
        if number in self.evidence:  # a follow-up: a reset drops its block (the cut is for every question)
            return True
        if wide:
            return tokens > recut.PLACEHOLDER_TOKENS * 2
        return tokens > (self.cap if piece.question else self.request.settings.prefix.reset_min_tokens)

    def pool(self, end: int, wide: bool, spare: int = -1) -> list[int]:
        """The pieces a reset over ``[0, end)`` may cut; none of message ``spare`` (the user's task)."""
        numbers = range(len(self.pieces)) if wide else self.recuttable
        return [n for n in numbers if self.pieces[n].message < end and self.pieces[n].message != spare
                and (not wide or self.may_cut(n, wide))]

    def movable(self, end: int, levels: Sequence[resets.Level], wide: bool, spare: int = -1) -> int:
        """Tokens of the pieces a reset over ``[0, end)`` may cut, as they are now."""
        return sum(self.piece_size(n, levels[self.pieces[n].message]) for n in self.pool(end, wide, spare))


def rest(message: dict[str, Any], own: list[forms.Piece]) -> tuple[str, int]:
    """A message's text besides its pieces (verbatim text, names, calls), and its media parts."""
    texts: list[str] = []
    content = message.get("content")
    if not any(p.part is None and p.call is None for p in own) and isinstance(content, str):
        texts.append(content)
    media = 0
    if isinstance(content, list):
        parts = {p.part for p in own if p.call is None}
        for i, part in enumerate(content):
            if i in parts:
                continue
            if shape.is_text(part):
                texts.append(part["text"])
            else:
                media += 1
    calls = {p.call for p in own if p.call is not None}
    for number, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {} if isinstance(call, dict) else {}
        texts.append(str(function.get("name", "")))
        if number not in calls:
            texts.append(str(function.get("arguments", "")))
    for name in ("name", "tool_call_id"):
        if isinstance(message.get(name), str):
            texts.append(message[name])
    return "\n".join(texts), media
