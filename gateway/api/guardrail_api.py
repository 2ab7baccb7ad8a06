"""LiteLLM's generic guardrail API, ``POST /beta/litellm_basic_guardrail_api``: the gateway as a
pre-call guardrail that a LiteLLM proxy calls over HTTP (``guardrail: generic_guardrail_api``).

LiteLLM posts the request's messages as OpenAI chat messages (``structured_messages``, for chat
completions, Responses and Anthropic Messages alike), or only ``texts`` where it has no messages.
The answer is ``{"action": "NONE"}`` when nothing changed, else ``GUARDRAIL_INTERVENED`` with the
same list rewritten (one row, or one text, per row or text received), which LiteLLM writes back into
the request before it calls the model. The helpers here are shared with the in-process guardrail
class (``gateway.plugins.litellm_guardrail``), so both read and answer LiteLLM the same way.

A guardrail that cannot compress lets the prompt through (``NONE``): the model may still take it,
and a compression service must not take the proxy's requests down with it. Malformed guardrail
requests, a wrong key and a model the gateway does not know are the caller's errors (4xx).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from gateway.api.common import authorized_body, parse_control
from gateway.api.openai_chat import validate_messages
from gateway.compress.compressor import Outcome
from gateway.compress.policy import Control
from gateway.core.chat import ChatCall, report_headers
from gateway.errors import BadRequest, ContextLengthExceeded, GatewayError
from gateway.run import offload

log = logging.getLogger("gateway.api.guardrail")

router = APIRouter()
PATH = "/beta/litellm_basic_guardrail_api"
NONE = "NONE"  # LiteLLM's "no change": the request goes on as it was
INTERVENED = "GUARDRAIL_INTERVENED"
# LiteLLM forwards inbound headers it does not allow-list as this placeholder, never their value.
HIDDEN_HEADER = "[present]"
# The request fields that set the reply's size (chat, Responses, Anthropic Messages).
REPLY_LIMITS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


@router.post(PATH)
async def basic_guardrail(request: Request) -> JSONResponse:
    gateway, body = await authorized_body(request)
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    if body.get("input_type") != "request":  # replies are never compressed
        return JSONResponse({"action": NONE})
    messages = guardrail_messages(body)
    if not messages:
        return JSONResponse({"action": NONE})
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' must name a model in the gateway's model_list.", param="model")
    control = parse_control(None, _visible_headers(body.get("request_headers")))
    # validating is per-part work
    messages = await offload.inline_or_run(offload.many(messages), validate_messages, messages)
    call = ChatCall(model, messages, reply_params(body, body.get("tools")), control)
    try:
        outcome = await gateway.chat.prepare(call)
    except GatewayError as exc:
        if not fails_open(exc):
            raise
        return JSONResponse({"action": NONE}, headers=failed_headers(exc))
    return JSONResponse(guardrail_answer(body, outcome), headers=report_headers(outcome))


def guardrail_messages(inputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conversation LiteLLM handed over: its structured messages, else each text as a user turn
    (the last text then holds the question, as a legacy completion's prompt does)."""
    structured = inputs.get("structured_messages")
    if isinstance(structured, list) and structured:
        return structured
    texts = inputs.get("texts")
    if isinstance(texts, list) and texts and all(isinstance(t, str) for t in texts):
        return [{"role": "user", "content": text} for text in texts]
    return []


def guardrail_answer(inputs: Mapping[str, Any], outcome: Outcome) -> dict[str, Any]:
    """The generic API's answer: the rewritten rows (or texts) in the shape they came in."""
    if outcome.action != "compressed":
        return {"action": NONE}
    return {"action": INTERVENED, **rewritten_fields(inputs, outcome)}


def rewritten_fields(inputs: Mapping[str, Any], outcome: Outcome) -> dict[str, Any]:
    """``structured_messages`` when LiteLLM sent messages, else ``texts``, one per text received."""
    if isinstance(inputs.get("structured_messages"), list) and inputs["structured_messages"]:
        return {"structured_messages": outcome.messages}
    return {"texts": [message["content"] for message in outcome.messages]}


def reply_params(request_data: Mapping[str, Any], tools: Any) -> dict[str, Any]:
    """What of the original request the budget needs: the reply's size and the tool definitions."""
    limit = next((request_data.get(k) for k in REPLY_LIMITS if request_data.get(k)), None)
    params: dict[str, Any] = {"max_tokens": limit} if isinstance(limit, int) and limit > 0 else {}
    return {**params, **_tools(tools)}


def control_from(headers: Any, field: Any = None) -> Control:
    """The request's ``x-mixpr-*`` switches (and ``mixpr`` body field), as the gateway reads them."""
    return parse_control(field, _visible_headers(headers))


def fails_open(exc: Exception) -> bool:
    """Whether the prompt should go on unchanged: a server fault, or compression cannot make it fit
    (the model's own error then says it best); not when the request is wrong (a bad switch, a model
    the gateway does not know)."""
    return isinstance(exc, ContextLengthExceeded) or getattr(exc, "status_code", 500) >= 500


def failed_headers(exc: Exception) -> dict[str, str]:
    """What the client learns when compression failed and the prompt went on as it was."""
    code = getattr(exc, "code", None) or type(exc).__name__
    log.warning("guardrail: compression failed (%s); the prompt goes on unchanged", code)
    return {"x-mixpr-action": "passthrough", "x-mixpr-error": str(code)}


def _visible_headers(headers: Any) -> dict[str, str]:
    if not isinstance(headers, Mapping):
        return {}
    return {str(k).lower(): str(v) for k, v in headers.items() if v != HIDDEN_HEADER}


def _tools(tools: Any) -> dict[str, Any]:
    return {"tools": tools} if isinstance(tools, list) and tools else {}
