"""OpenAI ``POST /v1/responses/compact``: the provider's own compaction, relayed, never a 404.

Codex (and the openai SDK's ``responses.compact``) asks the provider to compact a long conversation
into opaque ``compaction`` items. A proxy that answers 404 there breaks the client's compaction, so
the path always exists: it is relayed to the deployment's upstream when that is OpenAI-style
(``gateway.upstream.compact``), and answered with a 400 in the Responses error shape otherwise (an
Anthropic or local model, or an upstream that itself has no such path), which says what to do
instead. Nothing here is compressed: the provider reads the whole conversation to summarise it.
"""

from __future__ import annotations

import logging

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.api.common import authorized_body
from gateway.errors import BadRequest, ModelNotFound
from gateway.upstream import compact

log = logging.getLogger("gateway.api.responses_compact")

router = APIRouter()
UNSUPPORTED = "unsupported_endpoint"


@router.post("/v1/responses/compact")
@router.post("/responses/compact", include_in_schema=False)
async def responses_compact(request: Request) -> Response:
    gateway, body = await authorized_body(request)
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("You must provide a model parameter.", param="model")
    try:
        entry = gateway.chat.entry(model)
    except ModelNotFound as exc:  # a 404 here reads as "no compaction endpoint" to clients
        raise BadRequest(exc.message, param="model", code="model_not_found") from exc
    to = compact.target(entry)
    if to is None:  # named by the client's alias: the model it routes to is the operator's
        raise _unsupported(model, "its provider has no compaction endpoint")
    seconds = gateway.config.general_settings.request_timeout_s
    try:
        content = await compact.relay(gateway.chat.http, to, body, seconds)
    except compact.NoEndpoint as exc:  # an OpenAI-compatible server without the path
        raise _unsupported(model, str(exc)) from exc
    gateway.metrics.record_usage(entry.model_name, _usage(content))
    return Response(content, status_code=200, media_type="application/json")


def _unsupported(model: str, why: str) -> BadRequest:
    return BadRequest(f"The model `{model}` cannot compact on the provider's side: {why}. Compact the "
                      "conversation on the client's side (Codex does when this endpoint refuses), or "
                      "name a model served by OpenAI.", param="model", code=UNSUPPORTED)


def _usage(content: bytes) -> dict | None:
    try:
        answer = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    return answer.get("usage") if isinstance(answer, dict) else None
