"""Responses input items, kept whole: what MixPR sees of them, what the Responses relay sends, and
which items LiteLLM's translation cannot carry.

Two pure functions for the relay (``gateway.upstream.responses_relay``), as ``anthropic_blocks``
has for Messages:

* :func:`view`: the request as OpenAI chat messages for ``gateway.core`` to count and compress.
  Every compressible text (a user or assistant message's text, a function or custom tool call's
  output) becomes a text part tagged with the path of its text in the request (``SOURCE``). The rest
  is counted, never compressed: ``instructions`` and system or developer messages, tool calls,
  reasoning (its summary, as the message's ``name``, marked signed by ``thinking_blocks``), images
  and files, and any other item (``compaction``, ``compaction_trigger``, a type no API has yet) as
  one opaque part.
* :func:`write_back`: the client's own request with each tagged text replaced by what compression
  kept. Every other item, part and field is the client's, unchanged.

For an upstream served through LiteLLM's translation, :func:`refuse_untranslatable` turns what the
translation would drop silently (an item type it has no chat form for, a compaction item, a
reasoning item's ``encrypted_content``) into a 400 naming the item.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.api.json_paths import Path, get, replaced
from gateway.errors import BadRequest

SOURCE = "_mixpr_source"  # on a view text part: the path of its text in the request
CALLS = ("function_call", "custom_tool_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")
TEXTS = ("input_text", "output_text", "text")
SYSTEM_ROLES = ("system", "developer")
# Item types LiteLLM's Responses -> chat translation has a form for (1.108: every other type is dropped).
TRANSLATED = frozenset({"message", *CALLS, *OUTPUTS, "reasoning", "web_search_call"})
COMPACTION_ITEMS = ("compaction", "compaction_trigger")


def item_type(item: dict[str, Any]) -> Any:
    """An item's type; a message may leave it out (``{"role": ..., "content": ...}``)."""
    return item.get("type") or ("message" if "role" in item else None)


# -- the view ------------------------------------------------------------------------------------

def view(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``body`` as chat messages for counting and compression (see the module docstring)."""
    out: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        out.append({"role": "system", "content": instructions})
    items = body["input"]
    if isinstance(items, str):
        return [*out, {"role": "user", "content": _text(items, ("input",))}]
    for i, item in enumerate(items):
        _add(out, item, ("input", i))
    return out


def _add(out: list[dict[str, Any]], item: dict[str, Any], where: Path) -> None:
    kind = item_type(item)
    if kind == "message":
        out.append(_message(item, where))
    elif kind in CALLS:
        _add_call(out, item)
    elif kind in OUTPUTS:
        out.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")),
                    "content": _inner(item.get("output"), (*where, "output"))})
    elif kind == "reasoning":
        out.append(_reasoning(item))
    else:  # opaque to the gateway: counted as one part, sent as it came
        out.append({"role": "assistant", "content": [{"type": str(kind)}]})


def _message(item: dict[str, Any], where: Path) -> dict[str, Any]:
    role, content = str(item.get("role") or "user"), item.get("content")
    if role in SYSTEM_ROLES:  # the client's instructions: counted, never cut
        return {"role": "system", "content": _joined(content)}
    return {"role": "assistant" if role == "assistant" else "user",
            "content": _inner(content, (*where, "content"))}


def _add_call(out: list[dict[str, Any]], item: dict[str, Any]) -> None:
    """A tool call, on the assistant message of the calls just before it (one chat turn of calls)."""
    arguments = item.get("arguments") if item.get("type") == "function_call" else item.get("input")
    call = {"id": str(item.get("call_id", "")), "type": "function",
            "function": {"name": str(item.get("name", "")), "arguments": str(arguments or "")}}
    last = out[-1] if out else {}
    if last.get("role") == "assistant" and last.get("tool_calls") and not last["content"]:
        last["tool_calls"].append(call)
    else:
        out.append({"role": "assistant", "content": [], "tool_calls": [call]})


def _reasoning(item: dict[str, Any]) -> dict[str, Any]:
    summary = item.get("summary") if isinstance(item.get("summary"), list) else []
    texts = [str(p.get("text", "")) for p in summary if isinstance(p, dict)]
    return {"role": "assistant", "content": [], "name": "\n".join(texts),
            "thinking_blocks": [{"type": "thinking"}]}


def _inner(content: Any, where: Path) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return _text(content, where)
    if not isinstance(content, list):
        return []
    return [p for k, part in enumerate(content) for p in _part(part, (*where, k))]


def _part(part: Any, where: Path) -> list[dict[str, Any]]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in TEXTS:
        return _text(part.get("text"), (*where, "text"))
    if kind == "input_image":
        return [{"type": "image_url"}]
    return [{"type": "file" if kind == "input_file" else str(kind)}]  # counted at a media part's cost


def _text(text: Any, where: Path) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, SOURCE: list(where)}] if isinstance(text, str) else []


def _joined(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "\n\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


# -- the write-back ------------------------------------------------------------------------------

def write_back(body: dict[str, Any], sent: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``body`` with the texts of ``sent`` (the view, compressed) in place; ``body`` itself when
    nothing changed. (The gateway adds no parts on the relay's path: a follow-up's evidence is part
    of its message's text, and Self-Route, which adds an instruction, is not run there.)"""
    writes: dict[Path, Any] = {}
    for message in sent:
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and SOURCE in part:
                path = tuple(part[SOURCE])
                if get(body, path) != part.get("text"):
                    writes[path] = part.get("text")
    return replaced(body, sorted(writes.items(), key=lambda w: str(w[0]))) if writes else body


# -- what the translation cannot carry -----------------------------------------------------------

def refuse_untranslatable(items: Any) -> None:
    """A 400 for the first item LiteLLM's translation would drop, naming it and why."""
    for i, item in enumerate(items if isinstance(items, list) else ()):
        kind = item_type(item)
        if kind in COMPACTION_ITEMS:
            raise _refused(i, f"a '{kind}' item: provider-side compaction, which only the Responses API "
                              "of the provider that made it reads. Compact on the client's side (or through "
                              "/v1/responses/compact for an OpenAI model) and send the summary as a message",
                           "unsupported_compaction")
        if kind not in TRANSLATED:
            raise _refused(i, f"an item of type '{kind}', which has no chat form", "unsupported_item")
        if kind == "reasoning" and item.get("encrypted_content"):
            raise _refused(i, "a reasoning item with 'encrypted_content', which only the provider that "
                              "encrypted it can read. Leave it out, or send its summary as a message",
                           "unsupported_item")


def _refused(i: int, what: str, code: str) -> BadRequest:
    return BadRequest(f"input[{i}] is {what}. This model is served over chat completions, not the "
                      "Responses API, so the item cannot reach it.", param=f"input[{i}]", code=code)
