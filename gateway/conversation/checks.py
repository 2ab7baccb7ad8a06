"""What must hold for a compressed request before it is forwarded, checked against the client's own.

Providers reject a request whose tool calls and results do not pair up, whose thinking blocks changed,
or that carries more than four cache breakpoints; agents break when a system prompt, a tool definition
or an error they must read changed. Compression only ever replaces text, so every check compares the
built request with the client's: a problem the client's request already had is not the gateway's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.compress import messages as shape

MAX_BREAKPOINTS = 4  # cache_control markers Anthropic accepts in one request
FIXED_KEYS = ("role", "tool_call_id", "name", "thinking_blocks", "reasoning_content", "function_call")


def problems(original: Sequence[dict[str, Any]], sent: Sequence[dict[str, Any]],
             verbatim_ids: frozenset[str] = frozenset()) -> list[str]:
    """What is wrong with ``sent`` as a compressed form of ``original`` ([] = safe to forward)."""
    if len(original) != len(sent):
        return [f"{len(sent)} messages built from {len(original)}"]
    found = [problem for i, (a, b) in enumerate(zip(original, sent, strict=True))
             for problem in _message(i, a, b, verbatim_ids)]
    introduced = set(shape.pairing(sent)) - set(shape.pairing(original))
    found += sorted(introduced)
    if breakpoints(sent) > max(MAX_BREAKPOINTS, breakpoints(original)):
        found.append(f"{breakpoints(sent)} cache_control breakpoints (at most {MAX_BREAKPOINTS})")
    return found


def _message(i: int, a: dict[str, Any], b: dict[str, Any], verbatim_ids: frozenset[str]) -> list[str]:
    if a.get("role") in ("system", "developer") or a.get("tool_call_id") in verbatim_ids:
        return [] if a == b else [f"message {i}: a {a.get('role')} message that must pass verbatim changed"]
    if shape.thinks(a) and a != b:  # its provider checks the turn as it was sent
        return [f"message {i}: an assistant turn with thinking blocks changed"]
    found = [f"message {i}: {key} changed" for key in FIXED_KEYS if a.get(key) != b.get(key)]
    found += _calls(i, a.get("tool_calls") or [], b.get("tool_calls") or [])
    found += _parts(i, a.get("content"), b.get("content"))
    return found


def _calls(i: int, a: list[Any], b: list[Any]) -> list[str]:
    """The same calls (ids, names, order); arguments still JSON when they were."""
    if [_call_id(c) for c in a] != [_call_id(c) for c in b]:
        return [f"message {i}: tool calls changed"]
    found = []
    for x, y in zip(a, b, strict=True):
        if shape.is_json(_arguments(x)) and not shape.is_json(_arguments(y)):
            found.append(f"message {i}: arguments of {x.get('id')} are no longer JSON")
    return found


def _arguments(call: Any) -> Any:
    return shape.function(call).get("arguments")


def _call_id(call: Any) -> tuple[Any, Any]:
    if not isinstance(call, dict):
        return (None, None)
    return call.get("id"), shape.function(call).get("name")


def _parts(i: int, a: Any, b: Any) -> list[str]:
    """Text may change; every other part (images, documents, their markers) may not."""
    if isinstance(a, str) or a is None:
        return [] if isinstance(b, str) or b == a else [f"message {i}: content changed shape"]
    if not isinstance(b, list) or len(a) != len(b):
        return [f"message {i}: content parts changed"]
    found = []
    for x, y in zip(a, b, strict=True):
        if isinstance(x, dict) and x.get("type") == "text":
            if {k: v for k, v in x.items() if k != "text"} != {k: v for k, v in y.items() if k != "text"}:
                found.append(f"message {i}: a text part's markers changed")
        elif x != y:
            kind = x.get("type") if isinstance(x, dict) else "non-text"
            found.append(f"message {i}: a {kind} part changed")
    return found


def breakpoints(messages: Sequence[dict[str, Any]], tools: Any = None) -> int:
    """``cache_control`` markers on messages and their content parts, and on ``tools``."""
    count = sum(1 for tool in tools if isinstance(tool, dict) and "cache_control" in tool) if isinstance(
        tools, list) else 0
    for message in messages:
        count += "cache_control" in message
        content = message.get("content")
        if isinstance(content, list):
            count += sum(1 for p in content if isinstance(p, dict) and "cache_control" in p)
    return count
