"""Self-Route (Li et al. 2024, arXiv 2407.16833): let the model say the short prompt cannot answer.

When a prompt was compressed, the copy sent upstream asks the model to write "unanswerable" if the
text does not answer the question. In a conversation whose turn extends the previous one's bytes
(``gateway.conversation.history``), the same prefix is asked again first, with four times the evidence
for the new question (the provider's cache still holds the prefix). Then such a reply is escalated once: to a
fallback model with a longer window (the original messages, when they fit), or to the same model
with four times the budget. This
module holds the pieces; ``gateway.core.chat`` wires them into the one call every API shares.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gateway.compress.compressor import Outcome
from gateway.compress.policy import AUTO, Control
from gateway.config import MixprSettings

INSTRUCTION = 'If the question cannot be answered based on the provided text, write "unanswerable".'
INSTRUCTION_TOKENS = 32  # kept free in the window for the instruction (it is ~17 tokens)
WORD = "unanswerable"
RETRY_BUDGET_FACTOR = 4
RETRY_EVIDENCE_FACTOR = 4  # a conversation's turn first asks again with this many times the evidence
ANSWERED, EVIDENCE, ESCALATED = "answered", "evidence", "escalated"

_LEADING = re.compile(r"^[\W_]+")  # whitespace, quotes, markdown emphasis, punctuation


def eligible(params: dict[str, Any], settings: MixprSettings) -> bool:
    """Whether this request may be self-routed: enabled, and a single plain-text answer is expected.

    Tool calls and structured output cannot say "unanswerable"; with ``n > 1`` the choices may
    disagree.
    """
    if not settings.self_route.enabled:
        return False
    if params.get("tools") or params.get("functions") or params.get("response_format"):
        return False
    return params.get("n") in (None, 1)


def with_instruction(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of ``messages`` whose last user message ends with the Self-Route instruction."""
    copy = list(messages)
    for i in range(len(copy) - 1, -1, -1):
        if copy[i].get("role") == "user":
            copy[i] = {**copy[i], "content": _appended(copy[i].get("content"))}
            break
    return copy


def _appended(content: Any) -> Any:
    if isinstance(content, list):
        return [*content, {"type": "text", "text": INSTRUCTION}]
    return f"{content}\n\n{INSTRUCTION}" if content else INSTRUCTION


def verdict(reply: str, *, final: bool) -> bool | None:
    """Whether ``reply`` (or the start of it, unless ``final``) says "unanswerable"; None: too early.

    Case, surrounding quotes, punctuation and whitespace are ignored, and a reply that starts with
    the word counts ("Unanswerable: the text does not say").
    """
    text = _LEADING.sub("", reply).lower()
    if not WORD.startswith(text[: len(WORD)]):
        return False
    if len(text) > len(WORD):
        return not text[len(WORD)].isalnum()  # "unanswerables" is not the word
    if len(text) == len(WORD):
        return True if final else None  # the next token may still be a letter
    return False if final else None


def is_unanswerable(reply: str | None) -> bool:
    return bool(reply) and bool(verdict(reply, final=True))


async def hold_back(chunks: AsyncIterator[dict[str, Any]]) -> tuple[bool, AsyncIterator[dict[str, Any]]]:
    """Read chunks until their text can no longer spell "unanswerable".

    Returns whether it did, and the stream to send on: every chunk, the held ones first, unchanged.
    When it did, the upstream stream is closed (the answer is escalated) and nothing is left to send.
    """
    held: list[dict[str, Any]] = []
    text = ""
    decided: bool | None = None
    async for chunk in chunks:  # breaking out leaves the generator open, to be read on later
        held.append(chunk)
        text += _first_choice_text(chunk)
        decided = verdict(text, final=False)
        if decided is not None:
            break
    else:
        decided = verdict(text, final=True)
    if decided:
        await _close(chunks)
        return True, _replay([], None)
    return False, _replay(held, chunks)


def _first_choice_text(chunk: dict[str, Any]) -> str:
    for choice in chunk.get("choices") or ():
        if choice.get("index", 0) == 0:
            return (choice.get("delta") or {}).get("content") or ""
    return ""


async def _replay(
    held: list[dict[str, Any]], rest: AsyncIterator[dict[str, Any]] | None
) -> AsyncIterator[dict[str, Any]]:
    try:
        for chunk in held:
            yield chunk
        if rest is not None:
            async for chunk in rest:
                yield chunk
    finally:  # the client left early: let the upstream stream go too
        if rest is not None:
            await _close(rest)


async def _close(chunks: AsyncIterator[dict[str, Any]]) -> None:
    closer = getattr(chunks, "aclose", None)
    if closer is not None:
        await closer()


@dataclass(frozen=True)
class Escalation:
    """Where an "unanswerable" goes: a model, and how to prepare the original messages for it."""

    model: str  # a model_name
    control: Control
    fit_window: bool  # the window decides what is compressed, whatever the model's trigger says


def escalation(model: str, settings: MixprSettings, outcome: Outcome, control: Control) -> Escalation | None:
    """The one escalation for a compressed request; None when no larger context exists (then the
    request is not self-routed: an "unanswerable" with nowhere to go helps no one)."""
    fallback = settings.self_route.fallback_model
    if fallback and fallback != model:
        # The original messages when they fit its window; else compressed to fit it.
        return Escalation(fallback, Control(route=control.route, budget_tokens=AUTO), fit_window=True)
    if outcome.budget is None or outcome.room is None or outcome.budget >= outcome.room:
        return None  # the first call already had all the room this model has
    bigger = min(RETRY_BUDGET_FACTOR * outcome.budget, outcome.room)
    # The route decided the first time is kept: the question has not changed.
    return Escalation(model, Control(enabled=True, route=outcome.route or control.route,
                                     budget_tokens=bigger), fit_window=False)
