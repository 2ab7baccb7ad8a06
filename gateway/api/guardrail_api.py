"""LiteLLM's generic guardrail API, ``POST /beta/litellm_basic_guardrail_api``: the gateway as a
pre-call guardrail that a LiteLLM proxy calls over HTTP (``guardrail: generic_guardrail_api``).

LiteLLM posts the request's texts and its messages as OpenAI chat rows (``structured_messages``, for
chat completions, Responses and Anthropic Messages alike), or only ``texts`` where it has no
messages. The answer is ``{"action": "NONE"}`` when nothing changed, else ``GUARDRAIL_INTERVENED``
with ``texts``, one per text received, which LiteLLM writes back in place, block by block, before it
calls the model (``gateway.core.guardrail`` says why texts and not rows). The reading and the answer
are shared with the in-process guardrail class (``gateway.plugins.litellm_guardrail``).

A guardrail that cannot compress lets the prompt through (``NONE``): the model may still take it,
and a compression service must not take the proxy's requests down with it. Malformed guardrail
requests, a wrong key and a model the gateway does not know are the caller's errors (4xx); the
proxy's ``fail_on_error: false`` (see the README) lets even those through.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from gateway.api.common import authorized_body
from gateway.api.openai_chat import validate_messages
from gateway.compress.compressor import Outcome
from gateway.core.chat import ChatCall, report_headers
from gateway.core.guardrail import (
    Layout,
    answer,
    control_from,
    failed_headers,
    fails_open,
    guardrail_messages,
    layout,
    reply_params,
)
from gateway.errors import BadRequest, GatewayError
from gateway.run import offload

log = logging.getLogger("gateway.api.guardrail")

router = APIRouter()
PATH = "/beta/litellm_basic_guardrail_api"
NONE = "NONE"  # LiteLLM's "no change": the request goes on as it was
INTERVENED = "GUARDRAIL_INTERVENED"


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
    control = control_from(body.get("request_headers"))
    # validating is per-part work
    messages = await offload.inline_or_run(offload.many(messages), validate_messages, messages)
    plan = layout(body, messages)
    # LiteLLM writes back texts only, never max_tokens: the reply keeps what the client asked.
    call = ChatCall(model, plan.messages, reply_params(body, body.get("tools")), control, lowers_reply=False)
    try:
        outcome = await gateway.chat.prepare(call)
    except GatewayError as exc:
        if not fails_open(exc):
            raise
        return JSONResponse({"action": NONE}, headers=failed_headers(exc))
    return JSONResponse(guardrail_answer(plan, outcome), headers=report_headers(outcome))


def guardrail_answer(plan: Layout, outcome: Outcome) -> dict[str, Any]:
    """The generic API's answer: every text received, the compressed ones replaced."""
    if outcome.action != "compressed":
        return {"action": NONE}
    return {"action": INTERVENED, **answer(plan, outcome)}
