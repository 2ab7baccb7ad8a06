"""OpenAI ``POST /v1/chat/completions``: the request shape in, JSON or SSE out."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway.api.common import authorize, is_int_at_least, parse_control, read_json, state
from gateway.chat import ChatCall
from gateway.errors import BadRequest, GatewayError

log = logging.getLogger("gateway.api.openai_chat")

router = APIRouter()
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


@router.post("/v1/chat/completions")
@router.post("/chat/completions", include_in_schema=False)
async def chat_completions(request: Request) -> Response:
    gateway = state(request)
    authorize(request)
    body = await read_json(request, gateway.config.general_settings.max_body_bytes)
    call = parse_request(body, request.headers)
    reply = await gateway.chat.run(call)
    if reply.chunks is not None:
        return StreamingResponse(sse(reply.chunks), media_type="text/event-stream",
                                 headers={**reply.headers, **SSE_HEADERS})
    return JSONResponse(reply.response, headers=reply.headers)


def parse_request(body: Any, headers: Any) -> ChatCall:
    """Validate what the gateway relies on; everything else is the upstream's to judge."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("You must provide a model parameter.", param="model")
    messages = validate_messages(body.get("messages"))
    validate_params(body)
    control = parse_control(body.get("mixpr"), headers)
    params = {k: v for k, v in body.items() if k not in ("model", "messages", "mixpr", "stream")}
    return ChatCall(model=model, messages=messages, params=params, control=control,
                    stream=bool(body.get("stream")))


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
    return messages


def validate_params(body: dict[str, Any]) -> None:
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean.", param="stream")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and not is_int_at_least(value, 1):
            raise BadRequest(f"'{key}' must be a positive integer.", param=key)


async def sse(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Chunks as SSE; a failure midway becomes a final error event, then [DONE]."""
    try:
        async for chunk in chunks:
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
    except GatewayError as error:  # the status line is long gone: report it in-band
        log.warning("upstream stream failed after start: %s %s", error.status_code, error.code)
        yield b"data: " + json.dumps(error.to_json()).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"
