"""The raw chat relay (issue 23): a passthrough chat request to an OpenAI-compatible upstream as
bytes, and its answer, or its stream of server-sent events, back as bytes, without LiteLLM. (Its
twin for Anthropic Messages to Anthropic upstreams is ``gateway.upstream.relay``.)

A call through ``litellm.acompletion`` costs about 8 ms of CPU (pydantic models, the openai SDK's
request transform, the cost calculator, logging), ten times the rest of the gateway's work on a
short request. For an upstream that speaks the client's own wire format none of it is needed:
the gateway sends the request with the model name and credentials rewritten, through the app's
one pooled upstream client (``gateway.upstream.http``), relays the answer unparsed but for its
``model`` (the name the client asked for), and reads only the usage (for the metrics).

Which deployments take it is decided once, at start-up (:func:`route`): ``openai/<model>``
deployments whose LiteLLM translation is the identity (LiteLLM's plain ``OpenAIGPTConfig``, not
its o-series or GPT-5 configs, which rename parameters) and whose ``litellm_params`` hold nothing
but connection settings. That covers the embedded model, llama.cpp, vLLM, Ollama, OpenRouter and
OpenAI itself when configured as ``openai/...`` with an ``api_base``. ``hosted_vllm/`` and
``openrouter/`` keep going through LiteLLM: their configs rewrite tool schemas and parameters.
So does a deployment with ``max_retries`` > 0 (the openai SDK's retries are LiteLLM's business).

What the client sees is the same on both paths: statuses and error bodies come from
``forward.map_error`` applied to the exception the openai SDK would have raised for the same
answer (``statuses.status_error``); timeouts are the deployment's ``timeout`` (else
``request_timeout_s``) per phase, as the SDK applies them; message fields that are null are left
out, as LiteLLM leaves them out.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import litellm
import orjson
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig, OpenAIUnknownModelConfig
from litellm.utils import ProviderConfigManager

from gateway.config import ModelEntry
from gateway.errors import UpstreamError
from gateway.upstream import http, shapes, sse
from gateway.upstream.forward import ROUTER_ONLY_PARAMS, invalid_answer, supported_params
from gateway.upstream.statuses import ERROR_BODY_BYTES, error_in, status_error, stream_error

log = logging.getLogger("gateway.upstream.relay")

OPENAI_BASE = "https://api.openai.com/v1"
# litellm_params the relay understands: where to send, with which key, how long to wait.
CONNECTION_PARAMS = frozenset({"model", "api_base", "api_key", "organization", "timeout", "max_retries"})
# LiteLLM configs whose chat translation sends an OpenAI request as it came (unknown model names
# on an OpenAI-compatible server get the second).
IDENTITY_CONFIGS = (OpenAIGPTConfig, OpenAIUnknownModelConfig)
USAGE = b'"usage"'
DONE = b"data: [DONE]"


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
    base = openai_base(params)
    key = params.get("api_key") or os.environ.get("OPENAI_API_KEY")
    seconds = params.get("timeout", timeout)
    if not isinstance(base, str) or not isinstance(key, str) or not _number(seconds):
        return None  # LiteLLM reports a missing key or an odd setting in its own way
    return Route(base.rstrip("/") + "/chat/completions", name, openai_headers(key, params),
                 http.phases(seconds), supported_params(entry.upstream_model))


def openai_base(params: dict[str, Any]) -> Any:
    """Where an ``openai/`` deployment is served: its ``api_base``, else the environment's, as LiteLLM
    reads them, else OpenAI's own API (every relay to such a deployment goes there)."""
    return (params.get("api_base") or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE")
            or OPENAI_BASE)


def openai_headers(key: str, params: dict[str, Any]) -> dict[str, str]:
    """The headers of every relayed request to an ``openai/`` deployment: its key and organization."""
    headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
    if isinstance(params.get("organization"), str):
        headers["openai-organization"] = params["organization"]
    return headers


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
    """The routes of every deployment that takes the relay; requests go through the app's one
    upstream client (``gateway.upstream.http``)."""

    def __init__(self, routes: dict[str, Route], client: http.Client) -> None:
        self.routes = routes
        self.client = client

    @classmethod
    def for_models(cls, entries: list[ModelEntry], client: http.Client, *, timeout: float,
                   enabled: bool = True) -> Relay:
        found = {e.model_name: route(e, timeout=timeout) for e in entries} if enabled else {}
        routes = {name: r for name, r in found.items() if r is not None}
        log.info("raw relay for %d of %d models: %s", len(routes), len(entries), ", ".join(routes) or "none")
        return cls(routes, client)

    async def complete(self, route: Route, content: bytes, model: str) -> tuple[bytes, dict[str, Any] | None]:
        """The upstream's JSON answer as sent (its ``model`` field naming ``model``), and its usage."""
        response = await self.client.post(route.url, content, route.headers, route.timeout)
        raw = await http.read(response)
        if not 200 <= response.status < 300:
            raise status_error(route.url, route.model, response, raw)
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            answer = None
        if not isinstance(answer, dict):  # not JSON, or no answer (a list, a string: an error's text)
            raise invalid_answer()
        error = error_in(answer)
        if error is not None:  # a 2xx that is an error (OpenRouter's, once a model started): the one exit
            raise stream_error(error)
        usage = answer.get("usage")
        return shapes.renamed(raw, shapes.CHAT, model), usage if isinstance(usage, dict) else None

    async def open_stream(self, route: Route, content: bytes, model: str,
                          on_usage: Callable[[dict[str, Any]], None]) -> ChatEvents:
        """Start the stream: an error before its first byte raises here, with its own status; the
        events come from the returned stream, whole events at a time."""
        response = await self.client.post(route.url, content, route.headers, route.timeout)
        if not 200 <= response.status < 300:
            raw = await http.read(response, ERROR_BODY_BYTES)
            raise status_error(route.url, route.model, response, raw)
        return ChatEvents(response, model, on_usage, self.client.policy.max_event_bytes)


class ChatEvents(sse.Events):
    """The upstream's events byte for byte but for the ``model`` name; ``data: [DONE]`` added when
    the upstream ended without it, as the LiteLLM path always sends it; the usage (in the last event
    that has one) to ``on_usage`` once the stream is over, however it ends."""

    def __init__(self, response: Any, model: str, on_usage: Callable[[dict[str, Any]], None],
                 max_event_bytes: int = sse.MAX_EVENT_BYTES) -> None:
        super().__init__(response, max_event_bytes)
        self.model = model
        self.on_usage = on_usage
        self.last_usage = b""
        self.done = False

    def edit(self, event: bytes) -> bytes:
        if USAGE in event:
            self.last_usage = event
        self.done = event.rstrip().endswith(DONE)
        return shapes.renamed_event(sse.error_event(event), shapes.CHAT, self.model)

    def tail(self) -> bytes:
        return b"" if self.done else DONE + b"\n\n"

    def answer(self, payload: dict[str, Any]) -> list[bytes]:
        """A whole chat.completion as the one chunk that says it all (its usage too)."""
        choices = payload.get("choices")
        deltas = [_delta(c) for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []
        chunk = {**payload, "object": "chat.completion.chunk", "choices": deltas}
        return [b"data: " + orjson.dumps(chunk) + b"\n\n"]

    def closed(self) -> None:
        usage = _usage(self.last_usage)
        if usage:
            self.on_usage(usage)


def _delta(choice: dict[str, Any]) -> dict[str, Any]:
    """A whole answer's choice as a chunk's: its message as the delta, each tool call numbered (a
    chunk's tool calls carry their index)."""
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        message = {**message, "tool_calls": [{**c, "index": i} if isinstance(c, dict) else c
                                             for i, c in enumerate(calls)]}
    return {**{k: v for k, v in choice.items() if k != "message"}, "delta": message}


async def chunks(events: ChatEvents) -> AsyncIterator[dict[str, Any]]:
    """The relayed events as chat.completion.chunk dicts, for an API that translates them (Responses);
    a failure midway raises the mapped ``GatewayError``, as ``forward.stream_chunks`` does."""
    async for block in events:
        for event in sse.split(block):
            data = sse.data(event).strip()
            if data and data != b"[DONE]":
                yield _chunk(data)


def _chunk(data: bytes) -> dict[str, Any]:
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        chunk = None
    if not isinstance(chunk, dict):
        raise UpstreamError("The upstream model sent a stream event that is not a JSON object.",
                            status_code=502, code="upstream_invalid_response")
    if chunk.get("error"):  # an error event midway: the stream failed, as the openai SDK raises it
        raise stream_error(chunk["error"])
    return chunk


def _usage(block: bytes) -> dict[str, Any] | None:
    """The usage object of the last event in ``block`` that has a non-null one."""
    for event in reversed(sse.split(block)):
        if USAGE not in event:
            continue
        try:
            usage = orjson.loads(sse.data(event)).get("usage")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if isinstance(usage, dict):
            return usage
    return None
