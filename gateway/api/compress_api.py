"""``POST /v1/compress``: the gateway as another gateway's compression service.

The contract of LiteLLM's ``guardrail: headroom`` (1.108 and later; ``api_base`` at this gateway):
``{"messages": [...], "model": "..."}`` in (OpenAI chat rows), ``{"messages": [...]}`` out, as many
messages in the same roles and order, only their text compressed. LiteLLM puts the rows back by
position among those it held back, so a reshaped list would be refused. Any other caller may post the
same.

What LiteLLM sends is not a whole request: it holds back the system rows, the last user message,
every assistant row and the newest exchange's tool results, and sends the rest, older user messages
and tool results without their calls. So the rows are compressed as the earlier turns of a
conversation are on the proxy path (``ChatCall.conversation``: per-message forms, resets, the same
trigger and budget), never as one question: a row keeps the bytes it was first given, and the next
request's answer only appends.

The answer also says what was saved (``tokens_before``, ``tokens_after``, ``tokens_saved``,
``compression_ratio``: after over before), as LiteLLM logs and bills it, and carries the gateway's
``x-mixpr-*`` headers.

LiteLLM 1.110 (``ccr_retrieval``, on by default) adds ``"config": {"mode": "ccr"}`` and an
``x-headroom-affinity`` header (a hash of the caller's key and session): in ``ccr`` mode a service may
cut text behind a marker, list its hashes in ``ccr_hashes``, and serve the originals from
``GET /v1/retrieve/{hash}``. This gateway serves no retrieval: every mode (``ccr``, ``lossy_inline``,
Headroom's alias ``lossless_then_lossy``, or none) is answered as ``lossy_inline``, the text MixPR
keeps in place with no marker, and never ``ccr_hashes``, so LiteLLM offers the model no retrieval
tool; ``x-mixpr-mode-served`` says so. The affinity is accepted and not needed: a row's form is a
function of the row and the conversation, so every replica answers alike without a session.

Compression that fails on the server lets the rows through unchanged (a 200, with
``x-mixpr-error``, and the same fields: the rows' tokens before and after): LiteLLM's default
``fail_closed`` would otherwise fail the user's request. Bad input,
a wrong key or a model the gateway does not know are the caller's errors (4xx).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from gateway.api.common import authorized_body, parse_control
from gateway.api.openai_chat import validate_messages
from gateway.compress import messages as shape
from gateway.compress.compressor import Outcome
from gateway.core.chat import ChatCall, report_headers
from gateway.core.guardrail import failed_headers, fails_open, reply_params
from gateway.errors import BadRequest, GatewayError
from gateway.run import offload
from mixpr.tokens import count_tokens, is_loaded

router = APIRouter()
PATH = "/v1/compress"
TRANSFORM = "mixpr"
# ``config.mode`` values callers send (LiteLLM 1.110: ``ccr``; Headroom's own clients: the others).
MODES = ("ccr", "lossy_inline", "lossless_then_lossy")
SERVED = "lossy_inline"  # what every mode gets: nothing is kept for retrieval


@router.post(PATH)
async def compress(request: Request) -> JSONResponse:
    gateway, body = await authorized_body(request)
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' must name a model in the gateway's model_list.", param="model")
    asked = mode(body.get("config"))
    messages = await offload.inline_or_run(offload.many(body.get("messages")), validate_messages,
                                           body.get("messages"))
    control = parse_control(body.get("mixpr"), request.headers)
    # The caller forwards the rows only: the reply keeps the size it asked for.
    call = ChatCall(model, messages, reply_params(body, body.get("tools")), control, lowers_reply=False,
                    conversation=True)
    served = {"x-mixpr-mode-served": SERVED} if asked else {}
    try:
        outcome = await gateway.chat.prepare(call)
    except GatewayError as exc:
        if not fails_open(exc):
            raise
        upstream = gateway.chat.entry(model).upstream_model
        tokens = await offload.inline_or_run(offload.many(messages) or not is_loaded(upstream), _tokens,
                                             messages, upstream)
        unchanged = Outcome(messages, "passthrough", tokens, tokens)
        return JSONResponse(answer(unchanged),
                            headers={**report_headers(unchanged), **failed_headers(exc), **served})
    return JSONResponse(answer(outcome), headers={**report_headers(outcome), **served})


def mode(config: Any) -> str | None:
    """The ``config.mode`` asked for (None: no mode); a 400 for a config or mode no caller sends."""
    if config is None:
        return None
    if not isinstance(config, dict):
        raise BadRequest("'config' must be an object.", param="config")
    asked = config.get("mode")
    if asked is not None and asked not in MODES:
        raise BadRequest(f"'config.mode' must be one of {', '.join(MODES)} (every one is served as "
                         f"{SERVED}: this gateway keeps nothing to retrieve).", param="config.mode")
    return asked


def _tokens(messages: list[dict[str, Any]], model: str) -> int:
    """The rows' text in ``model``'s tokens: what a failed compression reports as before and after, so
    LiteLLM logs figures (it logs "?" for a missing field), not nothing."""
    return sum(count_tokens(shape.text(m), model) for m in messages)


def answer(outcome: Outcome) -> dict[str, Any]:
    """The rows with their compressed text (``gateway.conversation.checks`` held them to the rows sent:
    as many, the same roles, calls and parts; else they went as sent), and what was saved."""
    before, after = outcome.original_tokens, outcome.final_tokens
    return {"messages": outcome.messages, "tokens_before": before, "tokens_after": after,
            "tokens_saved": before - after,
            "compression_ratio": round(after / before, 4) if before else 1.0,
            "transforms_applied": [TRANSFORM] if outcome.action == "compressed" else []}
