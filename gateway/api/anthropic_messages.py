"""Anthropic ``POST /v1/messages``, served by any configured model.

What MixPR compresses is a view of the request's blocks (``gateway.api.anthropic_blocks``), never a
translation of it, so nothing the client sent is lost on the way:

* to an Anthropic model, the client's own request is relayed (``gateway.upstream.relay``) with
  only the compressed texts and the model name changed: every block, flag and field, the
  ``anthropic-beta`` header, and the upstream's answer, events and errors as they are;
* to any other model, each block takes its closest OpenAI chat form (``anthropic_blocks.to_openai``)
  and the request goes through LiteLLM; the chat completion, or its chunks, comes back through
  LiteLLM's Anthropic adapter as an Anthropic message or Anthropic SSE events. Fields only
  Anthropic takes (``context_management``) are dropped with a log line.

Errors on these paths are rendered in Anthropic's shape by ``gateway.app``'s error handlers.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import litellm
from fastapi import APIRouter, Request
from litellm import ModelResponse, ModelResponseStream
from litellm.llms.anthropic.pass_through.adapters.transformation import AnthropicAdapter
from litellm.utils import supports_mid_conversation_system
from starlette.responses import JSONResponse, Response

from gateway.api import anthropic_blocks as blocks
from gateway.api.common import (
    authorized_body,
    event_stream,
    is_int_at_least,
    parse_control,
    parsed,
    relayed_events,
)
from gateway.conversation import warmth
from gateway.core import cache_key
from gateway.core.chat import ChatCall, report_headers
from gateway.core.reply import forwarded
from gateway.edge.remote_files import ANTHROPIC, refuse_urls
from gateway.errors import BadRequest, GatewayError
from gateway.run import offload
from gateway.upstream import forward, relay

log = logging.getLogger("gateway.api.anthropic_messages")

router = APIRouter()

# Request fields only Anthropic's API takes: relayed to Anthropic models, dropped (and logged) for others.
ANTHROPIC_ONLY = ("context_management", "container", "mcp_servers", "service_tier")
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
    entry = gateway.chat.entry(body["model"])
    if relay.is_anthropic(entry):
        return await _relayed(gateway, call, body, entry, request)
    if forward.downloads_image_urls(entry.upstream_model):
        refuse_urls(body["messages"], ANTHROPIC, images=True)
    mid_system = _takes_mid_system(entry.upstream_model)
    # Refused before any compression when a block has no OpenAI form (an unknown type).
    await offload.inline_or_run(offload.is_big(body), blocks.to_openai, body, mid_system=mid_system)
    call = replace(call, wire=functools.partial(_openai_messages, body, mid_system=mid_system))
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
    """The Messages request as a chat call over its view (``anthropic_blocks.view``), and the
    adapter's map of shortened tool names."""
    _validate(body)
    refuse_urls(body["messages"], ANTHROPIC)
    control = parse_control(body.get("mixpr"), headers)
    # LiteLLM's adapter translates the parameters (tools, tool_choice, thinking, stop_sequences,
    # metadata ...); the messages are ``anthropic_blocks``' job, so it is given a placeholder.
    request = {k: v for k, v in body.items() if k not in ("mixpr", "stream", "system", "messages")}
    request["messages"] = [{"role": "user", "content": "."}]
    try:
        chat, names = AnthropicAdapter().translate_completion_input_params_with_tool_mapping(request)
    except Exception as exc:  # the adapter rejects malformed fields in its own ways
        raise BadRequest(f"The request could not be read as an Anthropic request ({type(exc).__name__}).",
                         param="messages") from None
    params = {k: v for k, v in chat.items() if k not in ("model", "messages", "stream", *ANTHROPIC_ONLY)}
    if body.get("stream"):  # message_delta reports the usage, so ask the upstream for it
        params["stream_options"] = {"include_usage": True}
    # The view drops block-level cache_control and makes the system prompt a string: the hour the
    # client asked for is read on its own blocks (a warm cache is not cut, a write is priced for it).
    hour = warmth.asks_an_hour(body.get("system"), body["messages"], body.get("tools"))
    call = ChatCall(model=body["model"], messages=blocks.view(body), params=params, control=control,
                    stream=bool(body.get("stream")), session=cache_key.session(headers),
                    cache_hour_asked=hour)
    return call, names


def _openai_messages(body: dict[str, Any], sent: list[dict[str, Any]], *,
                     mid_system: bool) -> list[dict[str, Any]]:
    """What an OpenAI chat upstream gets: the client's blocks with the compressed texts, in OpenAI forms."""
    dropped = sorted(k for k in ANTHROPIC_ONLY if k in body)
    if dropped:
        log.info("anthropic-only fields dropped for a chat upstream: %s", ", ".join(dropped))
    return blocks.to_openai(blocks.write_back(body, sent), mid_system=mid_system)


async def _relayed(gateway: Any, call: ChatCall, body: dict[str, Any], entry: Any,
                   request: Request) -> Response:
    """Compress the view, put what was kept back into the client's own request, and relay it."""
    outcome = await gateway.chat.prepare(call)
    big = offload.many(outcome.messages)  # the write-back walks every block
    sent = await offload.inline_or_run(big, blocks.write_back, body, outcome.messages)
    payload = forwarded({k: v for k, v in sent.items() if k != "mixpr"}, outcome.max_tokens)
    payload["model"] = relay.model_name(entry)
    timeout = entry.litellm_params.get("timeout") or gateway.config.general_settings.request_timeout_s
    upstream_headers = relay.headers(entry, request.headers, gateway.chat.betas)
    reply = await relay.send(gateway.chat.http, entry, payload, upstream_headers,
                             query=request.url.query, timeout=float(timeout), model=body["model"])
    headers = {**{k: v for k, v in reply.headers.items() if k.lower() != "content-type"},
               **report_headers(outcome)}
    media = reply.headers.get("content-type") or reply.headers.get("Content-Type")
    if reply.stream is not None:
        return event_stream(relayed_events(reply.stream, _error_event), headers, upstream=reply.stream)
    if reply.status < 400:
        gateway.metrics.record_usage(entry.model_name, relay.usage(reply.content))
    return Response(reply.content, status_code=reply.status, media_type=media or "application/json",
                    headers=headers)


def _takes_mid_system(model: str) -> bool:
    """Whether LiteLLM's model map says ``model`` accepts a system message after the first one."""
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
        return bool(supports_mid_conversation_system(name, provider))
    except Exception:  # an unknown model: assume only a leading system prompt
        return False


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
        # A ``system`` message inside ``messages``: Claude Code sends its environment that way.
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
            raise BadRequest(f"messages.{i}.role: must be 'user', 'assistant' or 'system'")
        if not isinstance(message.get("content"), str | list):
            raise BadRequest(f"messages.{i}.content: must be a string or a list of content blocks")
        if isinstance(message["content"], list) and not all(isinstance(b, dict) for b in message["content"]):
            raise BadRequest(f"messages.{i}.content: every content block must be an object")
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
        yield _error_event(error)


def _error_event(error: GatewayError) -> bytes:
    """Anthropic's in-band ``error`` event."""
    return f"event: error\ndata: {json.dumps(error_json(error.message, error.status_code))}\n\n".encode()


def _plain(message: Any) -> dict[str, Any]:
    return message.model_dump() if hasattr(message, "model_dump") else dict(message)
