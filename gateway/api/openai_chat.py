"""OpenAI ``POST /v1/chat/completions``: the request shape in, JSON or SSE out."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from gateway.api.common import authorized_body, event_stream, is_int_at_least, parse_control, parsed
from gateway.core import cache_key
from gateway.core.chat import ChatCall
from gateway.edge.remote_files import CHAT, refuse_urls
from gateway.errors import BadRequest, GatewayError
from gateway.upstream import forward as upstream
from gateway.upstream.forward import USER_PART_TYPES

log = logging.getLogger("gateway.api.openai_chat")

router = APIRouter()
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


@router.post("/v1/chat/completions")
@router.post("/chat/completions", include_in_schema=False)
async def chat_completions(request: Request) -> Response:
    gateway, body = await authorized_body(request)
    call = await parsed(parse_request, body, request.headers)
    if upstream.downloads_image_urls(gateway.chat.entry(call.model).upstream_model):
        refuse_urls(call.messages, CHAT, images=True)
    reply = await gateway.chat.run(call)
    if reply.events is not None:  # the raw relay's bytes (gateway.upstream.chat_relay)
        return event_stream(relayed(reply.events), reply.headers, upstream=reply.events)
    if reply.body is not None:
        return Response(reply.body, media_type="application/json", headers=reply.headers)
    if reply.chunks is not None:
        return event_stream(sse(reply.chunks), reply.headers)
    return JSONResponse(reply.response, headers=reply.headers)


def parse_request(body: Any, headers: Any) -> ChatCall:
    """Validate what the gateway relies on; everything else is the upstream's to judge."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("You must provide a model parameter.", param="model")
    messages = validate_messages(body.get("messages"))
    refuse_urls(messages, CHAT)  # not in validate_messages: the guardrail API forwards nothing
    validate_params(body)
    control = parse_control(body.get("mixpr"), headers)
    params = {k: v for k, v in body.items() if k not in ("model", "messages", "mixpr", "stream")}
    return ChatCall(model=model, messages=messages, params=params, control=control,
                    stream=bool(body.get("stream")), raw_reply=True, session=cache_key.session(headers))


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array of message objects.", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a string 'role'.", param=f"messages[{i}]")
        if message["role"] not in ROLES:
            # OpenAI refuses other roles too; some servers (llama_cpp.server) answer them with a 500.
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}.",
                             param=f"messages[{i}].role")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise BadRequest(f"messages[{i}].content must be a string, an array of parts or null.",
                             param=f"messages[{i}].content")
        if isinstance(content, list):
            _validate_parts(content, f"messages[{i}].content", user=message["role"] == "user")
        _check_types(message, MESSAGE_FIELDS, f"messages[{i}].")
    return messages


def _validate_parts(parts: list[Any], where: str, *, user: bool) -> None:
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise BadRequest(f"{where}[{j}] must be an object with a string 'type'.", param=f"{where}[{j}]")
        if user and part["type"] not in USER_PART_TYPES:
            raise BadRequest(f"{where}[{j}].type must be one of {', '.join(USER_PART_TYPES)}.",
                             param=f"{where}[{j}].type")
        payload = PART_PAYLOADS.get(part["type"])
        if payload is not None and not payload[1](part.get(part["type"])):
            # The part's content sits under its type's name; LiteLLM reads it without checking.
            name = f"{where}[{j}].{part['type']}"
            raise BadRequest(f"'{name}' must be {payload[0]}.", param=name)


def validate_params(body: dict[str, Any]) -> None:
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean.", param="stream")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and not is_int_at_least(value, 1):
            raise BadRequest(f"'{key}' must be a positive integer.", param=key)
    _check_types(body, PARAM_TYPES, "")
    for key in ("tools", "functions"):
        for j, item in enumerate(body.get(key) or ()):
            if not isinstance(item, dict) or not isinstance(item.get("function", item), dict):
                raise BadRequest(f"'{key}[{j}]' must be an object (with a 'function' object).",
                                 param=f"{key}[{j}]")


def _check_types(fields: dict[str, Any], types: dict[str, tuple[str, Any]], prefix: str) -> None:
    """OpenAI's types for the fields LiteLLM reads; null is fine, other fields are the upstream's."""
    for key, (described, accepts) in types.items():
        value = fields.get(key)
        if value is not None and not accepts(value):
            raise BadRequest(f"'{prefix}{key}' must be {described}.", param=prefix + key)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _objects(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


NUMBER = ("a number", _number)
INTEGER = ("an integer", _integer)
BOOLEAN = ("a boolean", lambda v: isinstance(v, bool))
STRING = ("a string", lambda v: isinstance(v, str))
OBJECT = ("an object", lambda v: isinstance(v, dict))
OBJECTS = ("an array of objects", _objects)
STRING_OR_OBJECT = ("a string or an object", lambda v: isinstance(v, str | dict))
PARAM_TYPES = {
    "temperature": NUMBER, "top_p": NUMBER, "presence_penalty": NUMBER, "frequency_penalty": NUMBER,
    "n": ("an integer >= 1", lambda v: is_int_at_least(v, 1)), "seed": INTEGER,
    "top_logprobs": ("an integer >= 0", lambda v: is_int_at_least(v, 0)), "logprobs": BOOLEAN,
    "parallel_tool_calls": BOOLEAN, "store": BOOLEAN, "user": STRING, "service_tier": STRING,
    "reasoning_effort": STRING, "stop": ("a string or an array of strings", lambda v: isinstance(v, str)
                                         or _strings(v)),
    "modalities": ("an array of strings", _strings), "tools": OBJECTS, "functions": OBJECTS,
    "tool_choice": STRING_OR_OBJECT, "function_call": STRING_OR_OBJECT, "response_format": OBJECT,
    "stream_options": OBJECT, "logit_bias": OBJECT, "metadata": OBJECT, "audio": OBJECT,
    "prediction": OBJECT,
}  # fmt: skip
PART_PAYLOADS = {"text": STRING, "image_url": STRING_OR_OBJECT, "input_audio": OBJECT, "file": OBJECT}
MESSAGE_FIELDS = {"name": STRING, "tool_call_id": STRING, "tool_calls": OBJECTS, "function_call": OBJECT}


async def sse(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Chunks as SSE; a failure midway becomes a final error event, then [DONE]."""
    try:
        async for chunk in chunks:
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
    except GatewayError as error:  # the status line is long gone: report it in-band
        log.warning("upstream stream failed after start: %s %s", error.status_code, error.code)
        yield b"data: " + json.dumps(error.to_json()).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


async def relayed(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The upstream's events as they came (its ``[DONE]`` included); a failure midway becomes a
    final error event, then [DONE], as in ``sse``."""
    try:
        async for block in events:
            yield block
    except GatewayError as error:
        log.warning("upstream stream failed after start: %s %s", error.status_code, error.code)
        yield b"data: " + json.dumps(error.to_json()).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"
