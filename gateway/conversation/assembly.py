"""The messages sent: the client's own, each piece's form in its place (copied on write)."""

from __future__ import annotations

from typing import Any

from gateway.conversation import forms, resets
from gateway.conversation.plan import Plan


def assemble(plan: Plan, levels: list[resets.Level]) -> list[dict[str, Any]]:
    """The client's messages with each piece's form at its message's level in its place."""
    sent = list(plan.request.messages)
    for message, numbers in plan.by_message.items():
        level = levels[message]
        replaced = [(plan.pieces[n], plan.text(n, level)) for n in numbers
                    if (n, level) in plan.forms or (level == 0 and n in plan.evidence)]
        if replaced:
            sent[message] = with_forms(sent[message], replaced)
    return sent


def with_forms(message: dict[str, Any], replaced: list[tuple[forms.Piece, str]]) -> dict[str, Any]:
    copy = dict(message)
    for piece, text in replaced:
        if piece.call is not None:
            calls = list(copy["tool_calls"])
            call = dict(calls[piece.call])
            call["function"] = {**call["function"], "arguments": text}
            calls[piece.call] = call
            copy["tool_calls"] = calls
        elif piece.part is None:
            copy["content"] = text
        else:
            content = list(copy["content"])
            content[piece.part] = {**content[piece.part], "text": text}
            copy["content"] = content
    return copy
