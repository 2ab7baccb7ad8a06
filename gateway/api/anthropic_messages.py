"""Anthropic ``POST /v1/messages``, served by any configured model.

The request becomes OpenAI chat messages with LiteLLM's Anthropic adapter (``system`` becomes a
system message, ``tool_use`` blocks become tool calls and ``tool_result`` blocks tool messages),
so its text blocks are compressed exactly as chat messages would be. The chat completion, or its
chunks, goes back through the same adapter into an Anthropic message or Anthropic SSE events.
Errors on these paths are rendered in Anthropic's shape by ``gateway.app``'s error handlers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from litellm import ModelResponse, ModelResponseStream
from litellm.llms.anthropic.pass_through.adapters.transformation import AnthropicAdapter
from starlette.responses import JSONResponse, Response

from gateway.api.common import authorized_body, event_stream, is_int_at_least, parse_control, parsed
from gateway.core.chat import ChatCall
from gateway.edge.remote_files import ANTHROPIC, refuse_urls
from gateway.errors import BadRequest, GatewayError

log = logging.getLogger("gateway.api.anthropic_messages")

router = APIRouter()

PATHS = frozenset({"/v1/messages", "/messages"})
# Anthropic's error type for each status it uses (and the gateway's own 502/503/504).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 408: "invalid_request_error", 413: "request_too_large",
               415: "invalid_request_error", 421: "invalid_request_error", 429: "rate_limit_error",
               503: "overloaded_error", 529: "overloaded_error"}


def error_json(message: str, status: int) -> dict[str, Any]:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


@router.post("/v1/messages")
@router.post("/messages", include_in_schema=False)
async def messages(request: Request) -> Response:
    gateway, body = await authorized_body(request)
    call, names = await parsed(parse_request, body, request.headers)
    reply = await gateway.chat.run(call)
    adapter = AnthropicAdapter()
    if reply.chunks is not None:
        failure = _Failure()
        events = adapter.translate_completion_output_params_streaming(
            _model_chunks(reply.chunks, failure), model=body["model"], tool_name_mapping=names)
        return event_stream(_sse(events, failure), reply.headers)
    message = adapter.translate_completion_output_params(ModelResponse(**reply.response),
                                                         tool_name_mapping=names)
    return JSONResponse(_plain(message), headers=reply.headers)


def parse_request(body: Any, headers: Any) -> tuple[ChatCall, dict[str, str]]:
    """The Messages request as a chat call, and the adapter's map of shortened tool names."""
    _validate(body)
    refuse_urls(body["messages"], ANTHROPIC)
    control = parse_control(body.get("mixpr"), headers)
    request = {k: v for k, v in body.items() if k not in ("mixpr", "stream")}
    try:
        chat, names = AnthropicAdapter().translate_completion_input_params_with_tool_mapping(request)
    except Exception as exc:  # the adapter rejects malformed blocks in its own ways
        raise BadRequest(f"'messages' could not be read as Anthropic messages ({type(exc).__name__}).",
                         param="messages") from None
    messages = [{k: v for k, v in m.items() if v is not None or k == "content"} for m in chat["messages"]]
    _keep_cache_control(body, messages)
    params = {k: v for k, v in chat.items() if k not in ("model", "messages", "stream")}
    if body.get("stream"):  # message_delta reports the usage, so ask the upstream for it
        params["stream_options"] = {"include_usage": True}
    call = ChatCall(model=body["model"], messages=messages, params=params, control=control,
                    stream=bool(body.get("stream")), verbatim_ids=_error_results(body))
    return call, names


def _keep_cache_control(body: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    """Put the client's ``cache_control`` markers back where they were: LiteLLM's adapter drops
    them, and they are how a client asks Anthropic to cache a prompt's prefix. A marked text block
    is found in order (a marker whose text the adapter merged away is skipped, not the ones after
    it); a marked ``tool_result`` goes on its tool message's last text part."""
    texts, results = _marked_blocks(body)
    for message in messages:
        marker = results.get(message.get("tool_call_id")) if message.get("role") == "tool" else None
        if marker is not None:
            message["content"] = _with_marker(message.get("content"), marker)
    at = 0
    for text, marker in texts:
        found = _find_text(messages, at, text)
        if found is not None:
            at = found + 1
            message = messages[found]
            message["content"] = [_marked(p, text, marker) for p in _as_parts(message["content"])]


def _find_text(messages: list[dict[str, Any]], start: int, text: str) -> int | None:
    """The first message from ``start`` (not a tool result) with an unmarked part of exactly ``text``."""
    for index in range(start, len(messages)):
        if messages[index].get("role") == "tool":
            continue
        if any(_unmarked(p, text) for p in _as_parts(messages[index].get("content"))):
            return index
    return None


def _as_parts(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _unmarked(part: Any, text: str) -> bool:
    return (isinstance(part, dict) and part.get("type") == "text" and part.get("text") == text
            and "cache_control" not in part)


def _marked(part: Any, text: str, marker: Any) -> Any:
    return {**part, "cache_control": marker} if _unmarked(part, text) else part


def _with_marker(content: Any, marker: Any) -> Any:
    parts = _as_parts(content)
    texts = [i for i, p in enumerate(parts) if isinstance(p, dict) and p.get("type") == "text"]
    if not texts:
        return content
    last = texts[-1]
    parts[last] = {**parts[last], "cache_control": marker}
    return parts


def _marked_blocks(body: dict[str, Any]) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """(text, cache_control) of every marked text block, system first, in order; and the markers of
    ``tool_result`` blocks by their ``tool_use_id``."""
    system = body.get("system")
    blocks = [*(system if isinstance(system, list) else [])]
    for message in body["messages"]:
        blocks += message["content"] if isinstance(message["content"], list) else []
    blocks = [b for b in blocks if isinstance(b, dict) and b.get("cache_control")]
    texts = [(b["text"], b["cache_control"]) for b in blocks
             if b.get("type") == "text" and isinstance(b.get("text"), str)]
    results = {b.get("tool_use_id"): b["cache_control"] for b in blocks if b.get("type") == "tool_result"}
    return texts, results


def _error_results(body: dict[str, Any]) -> frozenset[str]:
    """The ``tool_use_id`` of every ``tool_result`` the client marked ``is_error``: sent whole (the
    adapter drops the flag, and an agent's next step reads the error)."""
    return frozenset(b["tool_use_id"] for m in body["messages"] if isinstance(m["content"], list)
                     for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"
                     and b.get("is_error") and isinstance(b.get("tool_use_id"), str))


def _validate(body: Any) -> None:
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise BadRequest("model: Field required")
    if not is_int_at_least(body.get("max_tokens"), 1):
        raise BadRequest("max_tokens: must be a positive integer")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: must be a non-empty list of messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise BadRequest(f"messages.{i}.role: must be 'user' or 'assistant'")
        if not isinstance(message.get("content"), str | list):
            raise BadRequest(f"messages.{i}.content: must be a string or a list of content blocks")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise BadRequest("system: must be a string or a list of text blocks")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("stream: must be a boolean")


class _Failure:
    """Where the chunk reader leaves an upstream failure for the event writer to report."""

    error: GatewayError | None = None


async def _model_chunks(
    chunks: AsyncIterator[dict[str, Any]], failure: _Failure
) -> AsyncIterator[ModelResponseStream]:
    # The adapter reads LiteLLM's chunk objects; ``ChatService`` hands out their dicts.
    try:
        async for chunk in chunks:
            yield ModelResponseStream(**chunk)
    except GatewayError as error:  # ends the chunks; ``_sse`` reports it instead of a normal stop
        failure.error = error


async def _sse(events: AsyncIterator[bytes], failure: _Failure) -> AsyncIterator[bytes]:
    """The adapter's events until the upstream fails midway, then Anthropic's ``error`` event."""
    async for event in events:
        if failure.error is not None:
            break
        yield event
    if failure.error is not None:  # the status line is long gone: report it in-band
        error = failure.error
        log.warning("upstream stream failed after start: %s %s", error.status_code, error.code)
        data = json.dumps(error_json(error.message, error.status_code))
        yield f"event: error\ndata: {data}\n\n".encode()


def _plain(message: Any) -> dict[str, Any]:
    return message.model_dump() if hasattr(message, "model_dump") else dict(message)
