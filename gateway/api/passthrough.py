"""OpenAI ``POST /v1/embeddings`` and legacy ``POST /v1/completions``, forwarded through LiteLLM.

Embeddings are never compressed: shortening the input would change the vector. A legacy
completion's ``prompt`` string is compressed like a single user message (the query is its tail);
a list prompt (several prompts, or token ids) is forwarded as it is.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from gateway.api.common import authorized_body, event_stream, parse_control
from gateway.api.openai_chat import sse, validate_params
from gateway.compress.compressor import Outcome
from gateway.core.chat import report_headers
from gateway.core.reply import forwarded
from gateway.errors import BadRequest
from gateway.upstream import forward as upstream

router = APIRouter()


@router.post("/v1/embeddings")
@router.post("/embeddings", include_in_schema=False)
async def embeddings(request: Request) -> Response:
    gateway, body = await authorized_body(request)
    body = _object_with_model(body)
    if not _is_input(body.get("input")):
        raise BadRequest("'input' must be a non-empty string or array.", param="input")
    entry = gateway.chat.entry(body["model"])
    params = {k: v for k, v in body.items() if k not in ("model", "input", "mixpr")}
    # The openai SDK asks for base64 by default. LiteLLM's response model holds floats (and warns on
    # every base64 string), and not every server encodes base64: ask for floats, encode here.
    wants_base64 = params.get("encoding_format") == "base64"
    if wants_base64:
        params["encoding_format"] = "float"
    kwargs = upstream.build_passthrough_call(entry, params, known=upstream.EMBEDDING_PARAMS,
                                             timeout=gateway.config.general_settings.request_timeout_s)
    response = {**await upstream.embed({**kwargs, "input": body["input"]}), "model": body["model"]}
    if wants_base64:
        for item in response.get("data") or []:
            item["embedding"] = _base64(item["embedding"])
    tokens = _prompt_tokens(response)
    return JSONResponse(response, headers=report_headers(Outcome([], "passthrough", tokens, tokens)))


@router.post("/v1/completions")
@router.post("/completions", include_in_schema=False)
async def completions(request: Request) -> Response:
    gateway, body = await authorized_body(request)
    body = _object_with_model(body)
    prompt = body.get("prompt")
    if not _is_input(prompt):
        raise BadRequest("'prompt' must be a non-empty string or array.", param="prompt")
    validate_params(body)
    control = parse_control(body.get("mixpr"), request.headers)
    params = {k: v for k, v in body.items() if k not in ("model", "prompt", "mixpr", "stream")}
    if isinstance(prompt, str):
        entry, prompt, outcome = await gateway.chat.prepare_prompt(body["model"], prompt, params, control)
        params = forwarded(params, outcome.max_tokens)
    else:
        entry, outcome = gateway.chat.entry(body["model"]), None
    kwargs = upstream.build_passthrough_call(entry, params, known=upstream.TEXT_COMPLETION_PARAMS,
                                             timeout=gateway.config.general_settings.request_timeout_s)
    kwargs["prompt"] = prompt
    if body.get("stream"):
        stream = await upstream.open_text_stream(kwargs)
        headers = report_headers(outcome or Outcome([], "passthrough", 0, 0))
        return event_stream(sse(_named(upstream.stream_chunks(stream), body["model"])), headers)
    response = {**await upstream.text_complete(kwargs), "model": body["model"]}
    if outcome is None:
        tokens = _prompt_tokens(response)
        outcome = Outcome([], "passthrough", tokens, tokens)
    return JSONResponse(response, headers=report_headers(outcome))


async def _named(chunks: AsyncIterator[dict[str, Any]], model: str) -> AsyncIterator[dict[str, Any]]:
    """The chunks naming the model the client asked for, not the upstream's name for it."""
    try:
        async for chunk in chunks:
            yield {**chunk, "model": model}
    finally:
        await chunks.aclose()


def _base64(vector: list[float] | str) -> str:
    """OpenAI's base64 embedding: the vector's little-endian float32 bytes."""
    if isinstance(vector, str):
        return vector
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


def _object_with_model(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise BadRequest("You must provide a model parameter.", param="model")
    return body


def _is_input(value: Any) -> bool:
    return (isinstance(value, str) and bool(value)) or (isinstance(value, list) and bool(value))


def _prompt_tokens(response: dict[str, Any]) -> int:
    usage = response.get("usage") or {}
    return int(usage.get("prompt_tokens") or 0)
