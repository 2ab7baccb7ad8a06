"""Anthropic Messages blocks, kept whole: what MixPR sees of them, and what each upstream gets.

A Messages request is never rebuilt from a lossy translation. Three pure functions:

* :func:`view`: the request as OpenAI-shaped chat messages for ``gateway.core`` to count and
  compress. Every compressible text (a text block, a tool result's text, a text ``document``'s data
  or content blocks, a ``search_result``'s texts) becomes a text part tagged with where it came from
  (``SOURCE``); everything else is counted but never compressed: system prompts and mid-conversation
  ``system`` messages, tool calls, thinking (as the message's ``name``, the one field the counter
  reads verbatim), the text of a failed tool call (``is_error``: short, and what tells the model
  the call failed; also as ``name``), images and binary documents (as media parts at a fixed cost).
* :func:`write_back`: the client's own request with each tagged text replaced by what compression
  kept, and the text parts the gateway added (evidence, the Self-Route instruction) inserted as text
  blocks. Every other block, field and flag (``is_error``, ``citations``, ``cache_control``,
  signatures, unknown block types) is the client's, unchanged. This is what an Anthropic upstream gets.
* :func:`to_openai`: an Anthropic request (written back) in the closest form an OpenAI chat
  upstream accepts; see its docstring for each block.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from litellm.llms.anthropic.pass_through.adapters.transformation import truncate_tool_name

from gateway.api.json_paths import Path, get, replaced
from gateway.errors import BadRequest

log = logging.getLogger("gateway.api.anthropic_blocks")

SOURCE = "_mixpr_source"  # on a view text part: the path of its text in the request
ORIGIN = "_mixpr_origin"  # on a view message: the request message (i,) or tool_result block (i, j) it shows
ERROR_MARK = "[tool error]"
# Blocks an OpenAI chat upstream has a form for; any other type is refused for it (Anthropic gets all).
OPENAI_FORMS = frozenset({"text", "image", "document", "search_result", "tool_use", "tool_result",
                          "thinking", "redacted_thinking"})


# -- the view ------------------------------------------------------------------------------------

def view(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``body`` as chat messages for counting and compression (see the module docstring)."""
    out: list[dict[str, Any]] = []
    system = system_text(body.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    for i, message in enumerate(body["messages"]):
        out += _view_message(i, message)
    return _interleaved(out)


def _interleaved(shown: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code sends a tool loop's steps merged: one assistant message with every step's text,
    then every call, then one user message with every result. Where the steps can be told apart
    (as many texts as calls, or no texts; no thinking; the results right after, in the calls'
    order), the view shows one turn per step (text and call, then its result), as the loop ran:
    so the compressor sees turns, each result after the call that made it."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(shown):
        message = shown[i]
        calls = message.get("tool_calls") or []
        results = shown[i + 1 : i + 1 + len(calls)]
        parts = message.get("content") or []
        if (message.get("role") == "assistant" and len(calls) > 1 and "thinking_blocks" not in message
                and [r.get("tool_call_id") for r in results] == [c["id"] for c in calls]
                and all(r.get("role") == "tool" for r in results) and len(parts) in (0, len(calls))
                and all(p.get("type") == "text" for p in parts)):
            for k, (call, result) in enumerate(zip(calls, results, strict=True)):
                step = {**message, "content": parts[k : k + 1], "tool_calls": [call]}
                out += [step, result]
            i += 1 + len(calls)
            continue
        out.append(message)
        i += 1
    return out


def _view_message(i: int, message: dict[str, Any]) -> list[dict[str, Any]]:
    role, content = message["role"], message["content"]
    if role == "system":
        return [{"role": "system", "content": system_text(content)}]
    if isinstance(content, str):
        return [{"role": role, "content": _text(content, ("messages", i, "content")), ORIGIN: [i]}]
    tools, parts, calls, thinking = [], [], [], []
    for j, block in enumerate(content):
        where: Path = ("messages", i, "content", j)
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            tools.append(_view_tool_result(block, where, [i, j]))
        elif kind == "tool_use":
            calls.append(_tool_call(block))
        elif kind in ("thinking", "redacted_thinking"):
            thinking.append(str(block.get("thinking") or block.get("data") or ""))
        else:
            parts += _view_block(block, where)
    shown: dict[str, Any] = {"role": role, "content": parts, ORIGIN: [i]}
    if calls:
        shown["tool_calls"] = calls
    if thinking:  # counted as ``name``; ``thinking_blocks`` tells a compressor the message is signed
        shown["name"] = "\n".join(thinking)
        shown["thinking_blocks"] = [{"type": "thinking"}]
    # Tool results first: the order an OpenAI chat needs after the assistant's tool calls.
    return [*tools, shown] if parts or calls or thinking or not tools else tools


def _view_tool_result(block: dict[str, Any], where: Path, origin: list[int]) -> dict[str, Any]:
    inner = _view_inner(block.get("content"), (*where, "content"))
    shown = {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": inner,
             ORIGIN: origin}
    if block.get("is_error"):  # what tells the model its call failed: counted, never cut
        shown["content"] = [p for p in inner if SOURCE not in p]
        shown["name"] = "\n".join(p["text"] for p in inner if SOURCE in p)
    return shown


def _view_inner(content: Any, where: Path) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return _text(content, where)
    if isinstance(content, list):
        return [p for k, block in enumerate(content) for p in _view_block(block, (*where, k))]
    return []


def _view_block(block: Any, where: Path) -> list[dict[str, Any]]:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        return _text(block.get("text"), (*where, "text"))
    if kind == "search_result":
        return _view_inner(block.get("content"), (*where, "content"))
    if kind == "document":
        source = block.get("source") if isinstance(block.get("source"), dict) else {}
        if source.get("type") == "text":
            return _text(source.get("data"), (*where, "source", "data"))
        if source.get("type") == "content":
            return _view_inner(source.get("content"), (*where, "source", "content"))
        return [{"type": "file"}]  # a PDF or a file id: counted as one media part
    if kind == "image":
        return [{"type": "image_url"}]
    return [{"type": str(kind)}]  # an unknown block: counted at a media part's cost


def _text(text: Any, where: Path) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, SOURCE: list(where)}] if isinstance(text, str) else []


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(block.get("id", "")), "type": "function",
            "function": {"name": truncate_tool_name(str(block.get("name", ""))),
                         "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}}


def system_text(system: Any) -> str:
    """A system prompt (a string or text blocks) as one string."""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        texts = (b.get("text") for b in system if isinstance(b, dict))
        return "\n\n".join(t for t in texts if isinstance(t, str))
    return ""


# -- the write-back ------------------------------------------------------------------------------

def write_back(body: dict[str, Any], sent: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``body`` with the texts of ``sent`` (the view, compressed) in place; ``body`` itself when
    nothing changed. Containers on a changed path are copied; nothing else is."""
    writes: dict[Path, Any] = {}
    added: dict[tuple[int, ...], tuple[list[str], list[str]]] = {}
    for message in sent:
        origin = tuple(message.get(ORIGIN) or ())
        content = message.get("content")
        if isinstance(content, str) and origin:  # a gateway addition merged into a string
            added.setdefault(origin, ([], []))[0].append(content)
            continue
        seen = False
        for part in content if isinstance(content, list) else []:
            if not isinstance(part, dict):
                continue
            if SOURCE in part:
                seen = True
                path = tuple(part[SOURCE])
                if get(body, path) != part.get("text"):
                    writes[path] = part.get("text")
            elif part.get("type") == "text" and origin and isinstance(part.get("text"), str):
                added.setdefault(origin, ([], []))[1 if seen else 0].append(part["text"])
    if not writes and not added:
        return body
    out = replaced(body, sorted(writes.items(), key=lambda w: str(w[0])))
    for origin, (before, after) in added.items():
        out = _with_added(out, origin, before, after)
    return out


def _with_added(body: dict[str, Any], origin: tuple[int, ...], before: list[str],
                after: list[str]) -> dict[str, Any]:
    """Text blocks the gateway added, put into the message (or tool result) they were added to:
    ``before`` ahead of its first block that is not a tool result (Anthropic wants tool results first)."""
    path: Path = ("messages", origin[0], "content") + ((origin[1], "content") if len(origin) > 1 else ())
    content = get(body, path)
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    first = next((k for k, b in enumerate(blocks)
                  if not (isinstance(b, dict) and b.get("type") == "tool_result")), len(blocks))
    texts = [{"type": "text", "text": t} for t in before]
    blocks = [*blocks[:first], *texts, *blocks[first:], *({"type": "text", "text": t} for t in after)]
    return replaced(body, [(path, blocks)])


# -- the OpenAI forms ----------------------------------------------------------------------------

def to_openai(body: dict[str, Any], *, mid_system: bool = False) -> list[dict[str, Any]]:
    """``body``'s messages as OpenAI chat messages, each block in the closest form such an upstream
    accepts:

    * ``system`` (the field): the first system message; a ``system`` message inside ``messages``: a
      system message at its place when ``mid_system`` (the upstream takes one there), else appended
      to that first system message (every chat template accepts a leading system prompt; many
      open-weight ones refuse a later one);
    * text, image: text and image parts (``cache_control`` kept; an image URL is passed on unfetched);
    * ``document``: a text one as its title line and text, a content one as its blocks, a base64 one
      (a PDF) as a ``file`` part with its bytes, a file id as a ``file`` part with that id: never an
      image;
    * ``search_result``: a line naming its title and source, then its texts;
    * ``tool_use``: a tool call; ``tool_result``: a tool message, its text first marked
      ``[tool error]`` when ``is_error`` (and its ``cache_control`` on that text), its images and
      documents in a user message right after (a tool message holds only text);
    * ``thinking`` / ``redacted_thinking``: the assistant's ``thinking_blocks`` (LiteLLM replays them
      to providers that take them, and drops them for the rest) and ``reasoning_content``.

    ``citations`` have no OpenAI form; they are dropped, and logged. Any other block type has none
    either: a 400 naming it.
    """
    system = system_text(body.get("system"))
    head = _system_message(body.get("system"), system)
    out: list[dict[str, Any]] = [head] if head else []
    later: list[str] = []
    dropped: set[str] = set()
    for i, message in enumerate(body["messages"]):
        if message["role"] == "system":
            text = system_text(message["content"])
            if mid_system:
                out.append({"role": "system", "content": text})
            else:
                later.append(text)
            continue
        out += _openai_message(i, message, dropped)
    if later:
        out = [_merged(head, later), *(out[1:] if head else out)]
    if dropped:
        log.info("anthropic fields without an OpenAI chat form dropped: %s", ", ".join(sorted(dropped)))
    return out


def _merged(head: dict[str, Any] | None, later: list[str]) -> dict[str, Any]:
    """The leading system message with the later ones' texts after its own (its parts kept)."""
    content = head["content"] if head else ""
    if isinstance(content, list):
        return {"role": "system", "content": [*content, *({"type": "text", "text": t} for t in later)]}
    return {"role": "system", "content": "\n\n".join([content, *later] if content else later)}


def _system_message(system: Any, text: str) -> dict[str, Any] | None:
    if isinstance(system, list) and any(isinstance(b, dict) and b.get("cache_control") for b in system):
        return {"role": "system", "content": [{"type": "text", "text": b.get("text", ""), **_cache(b)}
                                              for b in system if isinstance(b, dict)]}
    return {"role": "system", "content": text} if text else None


def _openai_message(i: int, message: dict[str, Any], dropped: set[str]) -> list[dict[str, Any]]:
    role, content = message["role"], message["content"]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    tools: list[dict[str, Any]] = []
    attached: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    thinking: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        where = f"messages.{i}.content.{j}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in OPENAI_FORMS:
            raise BadRequest(f"{where}: a '{kind}' block has no form this model's API accepts; "
                             "it is accepted only by Anthropic models.", param=where)
        if kind == "tool_result":
            text, media = _tool_result(block, where, dropped)
            # A marked result keeps its marker, on the tool message's one text part.
            shown: Any = [{"type": "text", "text": text, **_cache(block)}] if _cache(block) else text
            tools.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")),
                          "content": shown})
            attached += media
        elif kind == "tool_use":
            calls.append(_tool_call(block))
        elif kind in ("thinking", "redacted_thinking"):
            thinking.append(dict(block))
        else:
            parts += _openai_parts(block, where, dropped)
    out: list[dict[str, Any]] = [*tools]
    if attached:
        out.append({"role": "user", "content": attached})
    if role == "assistant":
        if parts or calls or thinking:
            out.append(_assistant(parts, calls, thinking))
    elif parts or not tools:
        out.append({"role": role, "content": parts})
    return out


def _assistant(parts: list[dict[str, Any]], calls: list[dict[str, Any]],
               thinking: list[dict[str, Any]]) -> dict[str, Any]:
    texts = [p for p in parts if p.get("type") == "text"]
    marked = any("cache_control" in p for p in texts)
    content: Any = texts if marked else ("".join(p["text"] for p in texts) or None)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["thinking_blocks"] = thinking
        reasoning = "".join(b.get("thinking", "") for b in thinking if b.get("type") == "thinking")
        if reasoning:
            message["reasoning_content"] = reasoning
    return message


def _tool_result(block: dict[str, Any], where: str, dropped: set[str]) -> tuple[str, list[dict[str, Any]]]:
    """A tool result's text (marked when it is an error) and the media parts it carried."""
    content = block.get("content")
    inner = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    texts, media = [], []
    for k, item in enumerate(inner):
        for part in _openai_parts(item, f"{where}.content.{k}", dropped):
            (texts if part["type"] == "text" else media).append(part)
    text = "\n\n".join(p["text"] for p in texts)
    if block.get("is_error"):
        text = f"{ERROR_MARK} {text}" if text else ERROR_MARK
    if media:
        ref = f"[attachments of tool result {block.get('tool_use_id', '')}]"
        media = [{"type": "text", "text": ref}, *media]
    return text, media


def _openai_parts(block: Any, where: str, dropped: set[str]) -> list[dict[str, Any]]:
    kind = block.get("type") if isinstance(block, dict) else None
    if isinstance(block, dict) and block.get("citations") and kind == "text":
        dropped.add("citations")
    if kind == "text":
        return [{"type": "text", "text": block.get("text", ""), **_cache(block)}]
    if kind == "image":
        return [{"type": "image_url", "image_url": {"url": _image_url(block.get("source"))}, **_cache(block)}]
    if kind == "document":
        return _document(block, where, dropped)
    if kind == "search_result":
        if block.get("citations"):
            dropped.add("citations")
        head = f"[search result: {block.get('title', '')} ({block.get('source', '')})]"
        inner = block.get("content") if isinstance(block.get("content"), list) else []
        return [{"type": "text", "text": head},
                *(p for k, b in enumerate(inner) for p in _openai_parts(b, f"{where}.content.{k}", dropped))]
    raise BadRequest(f"{where}: a '{kind}' block has no form this model's API accepts here; "
                     "it is accepted only by Anthropic models.", param=where)


def _document(block: dict[str, Any], where: str, dropped: set[str]) -> list[dict[str, Any]]:
    source = block.get("source") if isinstance(block.get("source"), dict) else {}
    if block.get("citations"):
        dropped.add("citations")
    title = " — ".join(str(block[k]) for k in ("title", "context") if block.get(k))
    head = [{"type": "text", "text": f"[document: {title}]"}] if title else []
    kind = source.get("type")
    if kind == "text":
        return [*head, {"type": "text", "text": source.get("data", ""), **_cache(block)}]
    if kind == "content":
        inner = source.get("content")
        inner = [{"type": "text", "text": inner}] if isinstance(inner, str) else inner or []
        return [*head, *(p for k, b in enumerate(inner)
                         for p in _openai_parts(b, f"{where}.source.content.{k}", dropped))]
    if kind == "base64":
        media = source.get("media_type") or "application/pdf"
        name = str(block.get("title") or "document") + (".pdf" if media == "application/pdf" else "")
        file = {"file_data": f"data:{media};base64,{source.get('data', '')}", "filename": name}
        return [{"type": "file", "file": file, **_cache(block)}]
    if kind == "file":
        return [{"type": "file", "file": {"file_id": str(source.get("file_id", ""))}, **_cache(block)}]
    raise BadRequest(f"{where}.source: a document source of type '{kind}' has no form this model's "
                     "API accepts.", param=f"{where}.source")


def _image_url(source: Any) -> str:
    source = source if isinstance(source, dict) else {}
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    return str(source.get("url", ""))


def _cache(block: dict[str, Any]) -> dict[str, Any]:
    return {"cache_control": block["cache_control"]} if block.get("cache_control") else {}

