"""The shape of chat messages (OpenAI's format, as LiteLLM passes every API's): their text, their
tool calls, and whether calls and results pair up as providers demand.

One place for these readings, so that the forms, the resets, the checks before forwarding and the
benchmarks (``bench.agents``' pairing check) agree on what a message says and what a provider rejects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

# mini-swe-agent's (and SWE-agent-style) frame of a command's output, sent back as a user message.
OBSERVATION = re.compile(r"\A\s*<returncode>\s*-?\d+\s*</returncode>\s*<(?:output|warning|output_head)\b")


def observation(messages: Sequence[dict[str, Any]], i: int) -> bool:
    """Whether ``messages[i]`` is a text-based agent's tool output: a user message that answers an
    assistant turn, in the ``<returncode>``/``<output>`` frame (mini-swe-agent's observations)."""
    message = messages[i]
    return (message.get("role") == "user" and i > 0 and messages[i - 1].get("role") == "assistant"
            and bool(OBSERVATION.match(text(message)[:200])))


def is_text(part: Any) -> bool:
    """A text content part (the only kind a form replaces)."""
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


def text(message: dict[str, Any]) -> str:
    """A message's text: its string content, or its text parts joined by newlines."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if is_text(p))
    return ""


def thinks(message: dict[str, Any]) -> bool:
    """An assistant message with thinking blocks (its provider checks it, and what precedes it, as sent)."""
    return bool(message.get("thinking_blocks") or message.get("reasoning_content"))


def calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's tool calls (those that are objects)."""
    return [c for c in message.get("tool_calls") or () if isinstance(c, dict)]


def function(call: Any) -> dict[str, Any]:
    """A tool call's ``function`` (name and arguments); {} when it has none."""
    found = call.get("function") if isinstance(call, dict) else None
    return found if isinstance(found, dict) else {}


def is_json(value: Any) -> bool:
    """A string that parses as JSON."""
    if not isinstance(value, str):
        return False
    try:
        json.loads(value)
    except (ValueError, RecursionError):  # nested past Python's limit: a string like any other
        return False
    return True


def pairing(messages: Sequence[dict[str, Any]]) -> list[str]:
    """What a provider would reject about the tool calls and results ([] = valid): every tool message
    answers, once, a call of the assistant message before its run of results, and every call is
    answered before the next message that is not a result (parallel calls: all of them), or the end."""
    found: list[str] = []
    open_calls: list[Any] = []  # calls of the last assistant message still without a result
    answered: set[Any] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            found += _result(i, message.get("tool_call_id"), open_calls, answered)
            continue
        if open_calls:
            waiting = ", ".join(map(str, open_calls))
            found.append(f"message {i}: {role} message before the results of {waiting}")
        open_calls, answered = [], set()
        if role == "assistant":
            open_calls = [c.get("id") for c in calls(message)]
    if open_calls:
        found.append(f"end: no result for {', '.join(map(str, open_calls))}")
    return found


def _result(i: int, call: Any, open_calls: list[Any], answered: set[Any]) -> list[str]:
    if call in open_calls:
        open_calls.remove(call)
        answered.add(call)
        return []
    if call in answered:
        return [f"message {i}: a second result for {call}"]
    return [f"message {i}: a result for {call}, which the assistant message before it did not call"]
