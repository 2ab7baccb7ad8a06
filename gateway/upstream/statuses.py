"""What an upstream's answer or failure means for the client: the raw relays' statuses and errors
mapped as ``forward.map_error`` maps the exceptions the openai SDK (and so LiteLLM) raises for them,
so a client sees the same status and body on the relays' path as on LiteLLM's.

This is the one exit of every upstream answer that is not a success: a non-2xx answer
(:func:`status_error`, :func:`answer_error`), an error event in the middle of a stream
(:func:`stream_error`, and ``sse.error_event`` for the event itself: vLLM sends
``data: {"error": ...}`` after a chunk, Anthropic ``event: error``), all through ``map_error``'s
mapping and ``redaction``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import aiohttp
import httpx
import litellm
import openai
from litellm.litellm_core_utils.exception_mapping_utils import ExceptionCheckers

from gateway.errors import GatewayError
from gateway.upstream import redaction
from gateway.upstream.forward import invalid_answer, map_error, stream_error

ERROR_BODY_BYTES = 1 << 20  # an error answer is read up to this much
ERROR_WORDS = re.compile(rb'"(?:error|errors|detail|failed)"')  # what a 2xx that is an error holds

STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError, 401: openai.AuthenticationError, 403: openai.PermissionDeniedError,
    404: openai.NotFoundError, 409: openai.ConflictError, 422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def status_error(url: str, model: str, response: aiohttp.ClientResponse, raw: bytes) -> GatewayError:
    """:func:`answer_error` of an aiohttp ``response`` whose body was ``raw``."""
    return answer_error(url, model, response.status, response.headers, raw)


def answer_error(url: str, model: str, status: int, headers: Mapping[str, str], raw: bytes) -> GatewayError:
    """What ``map_error`` makes of the exception the openai SDK raises for this answer: the status,
    Retry-After and the upstream's own error object. 401 and 403 are the operator's credentials
    (``forward.auth_failed``); 408 and 504 the upstream timing out, a 504 ``upstream_timeout`` as
    LiteLLM maps them. (For 502 and 503 LiteLLM drops the upstream's error object and its path
    answers with LiteLLM's message; the relay keeps it.)"""
    request = httpx.Request("POST", url)
    if status in (408, 504):
        return map_error(openai.APITimeoutError(request=request))
    answer = httpx.Response(status, headers=list(headers.items()), content=raw, request=request)
    text = raw.decode("utf-8", errors="replace").strip()
    payload = redaction.decoded(text)
    # as the openai SDK words it ("Error code: 500 - ..."), but from the decoded, redacted strings
    message = payload if isinstance(payload, str) else f"Error code: {status} - {redaction.said(payload)}"
    message = message or f"Error code: {status}"
    data = payload.get("error", payload) if isinstance(payload, dict) else payload
    if status == 400 and ExceptionCheckers.is_error_str_context_window_exceeded(text):
        # LiteLLM turns these into its ContextWindowExceededError (code context_length_exceeded,
        # which clients look for), with the upstream's message: the same on this path.
        inner = data.get("message") if isinstance(data, dict) else None
        return map_error(litellm.ContextWindowExceededError(
            message=f"ContextWindowExceededError: OpenAIException - {inner or message}",
            model=model, llm_provider="openai", response=answer))
    fallback = openai.InternalServerError if status >= 500 else openai.APIStatusError
    kind = STATUS_ERRORS.get(status) or fallback
    return map_error(kind(message, response=answer, body=data))


def error_in(payload: Any) -> Any | None:
    """The error a 2xx answer says it is, whatever its status: OpenAI's (OpenRouter's, once a model
    has started) ``{"error": ...}``, Anthropic's ``{"type": "error", ...}``, a Response whose
    ``status`` is ``failed`` (or an event holding one), FastAPI's ``detail`` or a list of ``errors``
    (no answer of any API has those at its top); None for an answer."""
    if not isinstance(payload, dict):
        return None
    if payload.get("error"):
        return payload["error"]
    if payload.get("detail") or payload.get("errors"):
        return {"message": redaction.said(payload)}
    if payload.get("type") == "error":  # Anthropic's, or a Responses error event: the object itself
        return payload.get("error") or payload
    if payload.get("status") == "failed":
        return payload.get("error") or {"message": "The upstream model failed."}
    return error_in(payload.get("response"))  # a Responses event's Response (``response.failed``)


def answer_problem(raw: bytes) -> GatewayError | None:
    """What is wrong with a 2xx body every API answers as a JSON object: not one (a proxy's page, an
    event stream where none was asked for) a 502 ``upstream_invalid_response``, as the chat relay
    has it; an error object (:func:`answer_failure`) the one exit's mapping; else None."""
    try:
        is_object = isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        is_object = False
    if not is_object:
        return invalid_answer()
    return answer_failure(raw)


def answer_failure(raw: bytes) -> GatewayError | None:
    """:func:`stream_error` of a 2xx body that is an error (:func:`error_in`), else None: it leaves by
    the same exit as a non-2xx one, mapped and redacted."""
    if not ERROR_WORDS.search(raw):  # most answers: no parse
        return None
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    error = error_in(payload)
    return None if error is None else stream_error(error)


def transport_error(exc: BaseException) -> GatewayError:
    """A timeout is the gateway's 504 ``upstream_timeout``; any other failure of the connection
    (refused, dropped, a stream cut midway) its 502 ``upstream_connection_error``, as on the
    LiteLLM path."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, TimeoutError):
        return map_error(TimeoutError())
    return map_error(ConnectionError(type(exc).__name__))
