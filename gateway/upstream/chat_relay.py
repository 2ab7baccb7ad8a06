"""The raw chat relay (issue 23): a passthrough chat request to an OpenAI-compatible upstream as
bytes, and its answer, or its stream of server-sent events, back as bytes, without LiteLLM. (Its
twin for Anthropic Messages to Anthropic upstreams is ``gateway.upstream.relay``.)

A call through ``litellm.acompletion`` costs about 8 ms of CPU (pydantic models, the openai SDK's
request transform, the cost calculator, logging), ten times the rest of the gateway's work on a
short request. For an upstream that speaks the client's own wire format none of it is needed:
the gateway sends the request with the model name and credentials rewritten, through one pooled
aiohttp session, relays the answer unparsed, and reads only the usage (for the metrics).

Which deployments take it is decided once, at start-up (:func:`route`): ``openai/<model>``
deployments whose LiteLLM translation is the identity (LiteLLM's plain ``OpenAIGPTConfig``, not
its o-series or GPT-5 configs, which rename parameters) and whose ``litellm_params`` hold nothing
but connection settings. That covers the embedded model, llama.cpp, vLLM, Ollama, OpenRouter and
OpenAI itself when configured as ``openai/...`` with an ``api_base``. ``hosted_vllm/`` and
``openrouter/`` keep going through LiteLLM: their configs rewrite tool schemas and parameters.
So does a deployment with ``max_retries`` > 0 (the openai SDK's retries are LiteLLM's business).

What the client sees is the same on both paths: statuses and error bodies come from
``forward.map_error`` applied to the exception the openai SDK would have raised for the same
answer; timeouts are the deployment's ``timeout`` (else ``request_timeout_s``) per phase, as the
SDK applies them; message fields that are null are left out, as LiteLLM leaves them out.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import litellm
import openai
import orjson
from litellm.litellm_core_utils.exception_mapping_utils import ExceptionCheckers
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig, OpenAIUnknownModelConfig
from litellm.utils import ProviderConfigManager

from gateway.config import ModelEntry
from gateway.errors import GatewayError, UpstreamError
from gateway.upstream.forward import ROUTER_ONLY_PARAMS, map_error, supported_params

log = logging.getLogger("gateway.upstream.relay")

OPENAI_BASE = "https://api.openai.com/v1"
# litellm_params the relay understands: where to send, with which key, how long to wait.
CONNECTION_PARAMS = frozenset({"model", "api_base", "api_key", "organization", "timeout", "max_retries"})
# LiteLLM configs whose chat translation sends an OpenAI request as it came (unknown model names
# on an OpenAI-compatible server get the second).
IDENTITY_CONFIGS = (OpenAIGPTConfig, OpenAIUnknownModelConfig)
ERROR_BODY_BYTES = 1 << 20  # an error answer is read up to this much
KEEPALIVE_S = 30.0  # idle upstream connections are kept this long
USAGE = b'"usage"'
DONE = b"data: [DONE]"
STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError, 401: openai.AuthenticationError, 403: openai.PermissionDeniedError,
    404: openai.NotFoundError, 409: openai.ConflictError, 422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


@dataclass(frozen=True)
class Route:
    """Where one deployment's requests go, worked out once."""

    url: str
    model: str  # the name the upstream knows
    headers: dict[str, str]
    timeout: aiohttp.ClientTimeout
    known: frozenset[str]  # OpenAI parameters LiteLLM takes by name (and drops when null)


def route(entry: ModelEntry, *, timeout: float) -> Route | None:
    """The relay's route for ``entry``, or None when LiteLLM must translate or handle it."""
    params = {k: v for k, v in entry.litellm_params.items() if k not in ROUTER_ONLY_PARAMS}
    if set(params) - CONNECTION_PARAMS or params.get("max_retries"):
        return None
    provider, _, name = entry.upstream_model.partition("/")
    if provider != "openai" or not name or not _identity(name):
        return None
    base = (params.get("api_base") or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE")
            or OPENAI_BASE)
    key = params.get("api_key") or os.environ.get("OPENAI_API_KEY")
    seconds = params.get("timeout", timeout)
    if not isinstance(base, str) or not isinstance(key, str) or not _number(seconds):
        return None  # LiteLLM reports a missing key or an odd setting in its own way
    headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
    if isinstance(params.get("organization"), str):
        headers["openai-organization"] = params["organization"]
    # The openai SDK's timeout is per phase (connect, each read, each write), not for the whole call.
    phases = aiohttp.ClientTimeout(total=None, connect=seconds, sock_connect=seconds, sock_read=seconds)
    return Route(base.rstrip("/") + "/chat/completions", name, headers, phases,
                 supported_params(entry.upstream_model))


def _identity(name: str) -> bool:
    try:
        openai_provider = litellm.LlmProviders.OPENAI
        config = ProviderConfigManager.get_provider_chat_config(model=name, provider=openai_provider)
    except Exception:  # a LiteLLM that cannot say: translate as before
        return False
    return type(config) in IDENTITY_CONFIGS


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def body(route: Route, messages: list[dict[str, Any]], params: dict[str, Any], *, stream: bool) -> bytes:
    """The request as LiteLLM would send it: null message fields and null known parameters left out."""
    sent = {"model": route.model, "messages": [_without_nulls(m) for m in messages]}
    for key, value in params.items():
        if value is not None or key not in route.known:
            sent[key] = value
    if stream:
        sent["stream"] = True
    try:
        return orjson.dumps(sent)
    except (TypeError, orjson.JSONEncodeError):  # integers past 64 bits: JSON allows them, orjson does not
        return json.dumps(sent).encode()


def _without_nulls(message: dict[str, Any]) -> dict[str, Any]:
    if None in message.values():
        return {k: v for k, v in message.items() if v is not None}
    return message


class Relay:
    """The routes of every deployment that takes the relay, and the pooled client they share.

    The client is aiohttp's: httpx's connection pool walks every connection for every request
    (``_assign_requests_to_connections``), which held a relay at c=32 to fewer requests per second
    than at c=4 (measured, bench/README.md)."""

    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def for_models(cls, entries: list[ModelEntry], *, timeout: float, enabled: bool = True) -> Relay:
        found = {e.model_name: route(e, timeout=timeout) for e in entries} if enabled else {}
        routes = {name: r for name, r in found.items() if r is not None}
        log.info("raw relay for %d of %d models: %s", len(routes), len(entries), ", ".join(routes) or "none")
        return cls(routes)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:  # made on first use, on the loop that serves requests
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(self, route: Route, content: bytes) -> tuple[bytes, dict[str, Any] | None]:
        """The upstream's JSON answer as sent, and its usage."""
        try:
            async with self.session.post(route.url, data=content, headers=route.headers,
                                         timeout=route.timeout, allow_redirects=False) as response:
                raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc) from exc
        if not 200 <= response.status < 300:
            raise status_error(route, response, raw)
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamError("The upstream model sent an answer that is not JSON.", status_code=502,
                                code="upstream_invalid_response") from None
        usage = answer.get("usage") if isinstance(answer, dict) else None
        return raw, usage if isinstance(usage, dict) else None

    async def open_stream(self, route: Route, content: bytes,
                          on_usage: Callable[[dict[str, Any]], None]) -> AsyncIterator[bytes]:
        """Start the stream: an error before its first byte raises here, with its own status; the
        events come from the returned iterator, whole events at a time."""
        try:
            response = await self.session.post(route.url, data=content, headers=route.headers,
                                               timeout=route.timeout, allow_redirects=False)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc) from exc
        if not 200 <= response.status < 300:
            try:
                raw = await response.content.read(ERROR_BODY_BYTES)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise transport_error(exc) from exc
            finally:
                response.close()
            raise status_error(route, response, raw)
        return _events(response, on_usage)


async def _events(response: aiohttp.ClientResponse,
                  on_usage: Callable[[dict[str, Any]], None]) -> AsyncIterator[bytes]:
    """The upstream's events, byte for byte, each yield ending at an event boundary (so an error
    event after a failure never lands inside a half-sent one); ``data: [DONE]`` added when the
    upstream ended without it, as the LiteLLM path always sends it. A failure midway raises the
    mapped ``GatewayError``; the usage (in the last event that has one) goes to ``on_usage``."""
    pending, last_usage, done, finished = b"", b"", False, False
    try:
        async for data in response.content.iter_any():
            pending += data
            cut = _boundary(pending)
            if cut:
                out, pending = pending[:cut], pending[cut:]
                if USAGE in out:
                    last_usage = out
                done = out.rstrip().endswith(DONE)
                yield out
        finished = True
        if pending.strip():  # an unterminated last event
            done = pending.rstrip().endswith(DONE)
            yield pending + b"\n\n"
        if not done:
            yield DONE + b"\n\n"
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise transport_error(exc) from exc
    finally:
        # Whole: the connection goes back to the pool. Cut short (the client left, which cancels
        # us, or the upstream failed): closed, so the upstream stops generating.
        if finished:
            response.release()
        else:
            response.close()
        usage = _usage(last_usage)
        if usage:
            on_usage(usage)


def _boundary(buffer: bytes) -> int:
    """The end of the last whole event in ``buffer`` (0: none yet); SSE ends events with a blank line."""
    best = 0
    for mark in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        at = buffer.rfind(mark)
        if at >= 0:
            best = max(best, at + len(mark))
    return best


def _usage(block: bytes) -> dict[str, Any] | None:
    """The usage object of the last event in ``block`` that has a non-null one."""
    for event in reversed(block.replace(b"\r\n", b"\n").split(b"\n\n")):
        if USAGE not in event:
            continue
        data = b"".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
        try:
            usage = orjson.loads(data).get("usage")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if isinstance(usage, dict):
            return usage
    return None


def status_error(route: Route, response: aiohttp.ClientResponse, raw: bytes) -> GatewayError:
    """What ``map_error`` makes of the exception the openai SDK raises for this answer: the status,
    Retry-After and the upstream's own error object. 408 and 504 are the upstream timing out, a 504
    ``upstream_timeout`` as LiteLLM maps them. (For 401, 403, 502 and 503 LiteLLM drops the
    upstream's error object and its path answers with LiteLLM's message; the relay keeps it.)"""
    status = response.status
    request = httpx.Request("POST", route.url)
    if status in (408, 504):
        return map_error(openai.APITimeoutError(request=request))
    answer = httpx.Response(status, headers=list(response.headers.items()), content=raw, request=request)
    text = raw.decode("utf-8", errors="replace").strip()
    payload: Any = text
    try:
        payload = json.loads(text)
        message = f"Error code: {status} - {payload}"
    except ValueError:
        message = text or f"Error code: {status}"
    data = payload.get("error", payload) if isinstance(payload, dict) else payload
    if status == 400 and ExceptionCheckers.is_error_str_context_window_exceeded(text):
        # LiteLLM turns these into its ContextWindowExceededError (code context_length_exceeded,
        # which clients look for), with the upstream's message: the same on this path.
        inner = data.get("message") if isinstance(data, dict) else None
        return map_error(litellm.ContextWindowExceededError(
            message=f"ContextWindowExceededError: OpenAIException - {inner or message}",
            model=route.model, llm_provider="openai", response=answer))
    fallback = openai.InternalServerError if status >= 500 else openai.APIStatusError
    kind = STATUS_ERRORS.get(status) or fallback
    return map_error(kind(message, response=answer, body=data))


def transport_error(exc: BaseException) -> GatewayError:
    """A timeout is the gateway's 504 ``upstream_timeout``; any other failure of the connection
    (refused, dropped, a stream cut midway) its 502 ``upstream_connection_error``, as on the
    LiteLLM path."""
    if isinstance(exc, TimeoutError):
        return map_error(TimeoutError())
    return map_error(ConnectionError(type(exc).__name__))
