"""The Responses relay: a ``POST /v1/responses`` request sent to an upstream that serves the
Responses API itself (OpenAI, Azure, an OpenAI-style server the operator declares), as bytes.

LiteLLM's Responses -> chat translation drops what it has no chat form for: ``compaction`` and
``compaction_trigger`` items, a reasoning item's ``encrypted_content``, item types and top-level
fields newer than it. An upstream that speaks Responses needs no translation: the client's body goes
out with only the model name (and any compressed texts, ``gateway.api.responses_items``) changed, and
the upstream's answer, or its events as they come, back byte for byte but for the ``model`` the
client asked for. Errors go through the chat relay's mapping (``statuses.status_error``: the same
statuses, bodies and redaction as every other upstream answer), and so does the text of an error
event in a stream (``sse.redacted``: its strings redacted once decoded).

Which deployments take it (:func:`target`): ``model_info.responses_api`` when the operator set it;
else OpenAI itself (an ``openai/`` model with no ``api_base``) and Azure (``azure/`` with an
``api_base``, its v1 API). An ``openai/`` model on another base takes it only when declared: most
OpenAI-compatible servers (llama.cpp, vLLM, Ollama) serve chat completions, not all of Responses.
A deployment whose ``litellm_params`` hold more than connection settings keeps LiteLLM's path,
whose translation applies them. One attempt per request: retrying is the client's call.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from gateway.config import ROUTER_ONLY_PARAMS, ModelEntry
from gateway.errors import GatewayError
from gateway.run import offload
from gateway.upstream import http, shapes, sse
from gateway.upstream.chat_relay import openai_base, openai_headers
from gateway.upstream.statuses import ERROR_BODY_BYTES, answer_problem, status_error, stream_error

# litellm_params the relay understands: where to send, with which key, how long to wait.
CONNECTION_PARAMS = frozenset({"model", "api_base", "api_key", "api_version", "organization", "timeout",
                               "max_retries"})
RESPONSE: tuple[shapes.Path, ...] = (("model",),)  # a Responses object
RESPONSE_EVENT: tuple[shapes.Path, ...] = (("response", "model"),)  # response.created, .completed, ...
# The events after which a Responses stream has nothing more to say.
ENDS = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})
# Events whose text may quote the operator's setup (an upstream's own error message).
ERROR_EVENTS = frozenset({"error", "response.failed"})
EVENT_LINE = re.compile(rb"(?:^|[\r\n])event:[ ]?([^\r\n]*)")
REPLY_HEADERS = ("retry-after", "x-request-id", "openai-processing-ms")
USAGE = b'"usage"'


@dataclass(frozen=True)
class Target:
    """Where one deployment's Responses requests go."""

    url: str
    model: str  # the name the upstream knows
    headers: dict[str, str]
    timeout: aiohttp.ClientTimeout


@dataclass
class Relayed:
    """The upstream's answer: a Responses object (bytes, model renamed) or its open event stream."""

    headers: dict[str, str]
    content: bytes = b""
    stream: ResponseEvents | None = None


def target(entry: ModelEntry, *, timeout: float) -> Target | None:
    """The relay's target for ``entry``, or None when LiteLLM's translation serves it."""
    params = {k: v for k, v in entry.litellm_params.items() if k not in ROUTER_ONLY_PARAMS}
    provider, _, name = entry.upstream_model.partition("/")
    if not name or set(params) - CONNECTION_PARAMS or not _serves_responses(entry, provider, params):
        return None
    seconds = params.get("timeout")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
        seconds = timeout  # unset, or a value no timeout can be made of
    if provider == "azure":
        key = params.get("api_key") or os.environ.get("AZURE_API_KEY") or ""
        base = str(params.get("api_base") or os.environ.get("AZURE_API_BASE") or "").rstrip("/")
        base = base.removesuffix("/openai/v1").removesuffix("/openai")  # the resource, however written
        return Target(base + "/openai/v1/responses", name,
                      {"content-type": "application/json", "api-key": str(key)}, http.phases(float(seconds)))
    key = params.get("api_key") or os.environ.get("OPENAI_API_KEY") or ""
    return Target(str(openai_base(params)).rstrip("/") + "/responses", name, openai_headers(str(key), params),
                  http.phases(float(seconds)))


def not_honoured(entry: ModelEntry, *, timeout: float) -> str | None:
    """Why a deployment that declares ``model_info.responses_api: true`` does not take the relay (the
    start-up warning's words), or None when it takes it or declares nothing."""
    if getattr(entry.model_info, "responses_api", None) is not True or target(entry, timeout=timeout):
        return None
    params = {k: v for k, v in entry.litellm_params.items() if k not in ROUTER_ONLY_PARAMS}
    extra = sorted(set(params) - CONNECTION_PARAMS)
    if extra:
        return f"its litellm_params hold {', '.join(extra)}, which only LiteLLM's translation applies"
    provider = entry.upstream_model.partition("/")[0]
    if provider == "azure":
        return "an Azure deployment needs its resource's api_base (or AZURE_API_BASE)"
    return f"the relay speaks to openai/ and azure/ deployments, not {provider}/"


def _serves_responses(entry: ModelEntry, provider: str, params: dict[str, Any]) -> bool:
    declared = getattr(entry.model_info, "responses_api", None)
    if provider == "azure":  # whatever is declared, an Azure deployment needs its resource's address
        return declared is not False and bool(params.get("api_base") or os.environ.get("AZURE_API_BASE"))
    if declared is not None:
        return bool(declared) and provider == "openai"
    return provider == "openai" and not params.get("api_base") and not (
        os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE"))


async def send(client: http.Client, to: Target, body: dict[str, Any], *, model: str,
               on_usage: Callable[[dict[str, Any] | None], None]) -> Relayed:
    """POST ``body`` to the upstream's ``/responses``. An error status raises the mapped
    ``GatewayError`` (as the chat relay's do); a streamed answer comes back open (read it to its end,
    or close it); ``on_usage`` gets the answer's usage (a stream's, once it is over)."""
    data = await offload.inline_or_run(offload.is_big(body), _encoded, {**body, "model": to.model})
    response = await client.post(to.url, data, to.headers, to.timeout)
    passed = {k: v for k, v in response.headers.items() if k.lower() in REPLY_HEADERS}
    if not 200 <= response.status < 300:
        raw = await http.read(response, ERROR_BODY_BYTES)
        raise status_error(to.url, to.model, response, raw)
    if body.get("stream"):  # a whole Response answered instead is told as its events (``as_events``)
        return Relayed(passed, stream=ResponseEvents(response, model, on_usage,
                                                     client.policy.max_event_bytes))
    content = await http.read(response)
    on_usage(usage(content))
    problem = answer_problem(content)
    if problem is not None:  # not JSON, {"error": ...}, a Response whose status is "failed": as on chat
        raise problem
    return Relayed(passed, content=shapes.renamed(content, RESPONSE, model))


def as_events(answer: dict[str, Any]) -> list[bytes]:
    """A whole Response as the events a stream of it ends with: ``response.created``, each output
    item added and done, ``response.completed`` (what clients read the answer from)."""
    started = {**answer, "status": "in_progress", "output": []}
    kinds: list[tuple[str, dict[str, Any]]] = [("response.created", {"response": started})]
    output = answer.get("output") if isinstance(answer.get("output"), list) else []
    for index, item in enumerate(output):
        kinds += [("response.output_item.added", {"output_index": index, "item": item}),
                  ("response.output_item.done", {"output_index": index, "item": item})]
    kinds.append(("response.completed", {"response": answer}))
    return [f"event: {kind}\ndata: ".encode() + orjson.dumps({"type": kind, "sequence_number": n, **fields})
            + b"\n\n" for n, (kind, fields) in enumerate(kinds)]


def _encoded(body: dict[str, Any]) -> bytes:
    """The body as compact JSON: every member in the client's order, non-ASCII as it came."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class ResponseEvents(sse.Events):
    """The upstream's Responses events as it sent them, whole events at a time, but for the model's
    name (``response.model``) and the operator's values in an error event's text; ``ended_well`` once
    a final event came; the usage of the last event that has one to ``on_usage`` at the end."""

    def __init__(self, response: Any, model: str, on_usage: Callable[[dict[str, Any] | None], None],
                 max_event_bytes: int = sse.MAX_EVENT_BYTES) -> None:
        super().__init__(response, max_event_bytes)
        self.model = model
        self.on_usage = on_usage
        self.ended_well = False
        self.count = 0  # events relayed: the sequence number of an error event the gateway adds
        self.last_usage = b""

    def edit(self, event: bytes) -> bytes:
        if sse.data(event):  # a comment (": keep-alive") is no event: it takes no sequence number
            self.count += 1
        kind = event_type(event)
        error = sse.error_of(event)
        if error is not None and not kind:  # vLLM's untyped {"error": ...}: the API's error event
            event, kind = error_event(stream_error(error), self.count - 1), "error"
        elif error is not None or kind in ERROR_EVENTS:  # redacted once decoded, as it came otherwise
            event = sse.redacted(event)
        self.ended_well = self.ended_well or kind in ENDS
        if USAGE in event:
            self.last_usage = event
        return shapes.renamed_event(event, RESPONSE_EVENT, self.model)

    def answer(self, payload: dict[str, Any]) -> list[bytes]:
        return as_events(payload)

    def closed(self) -> None:
        self.on_usage(_event_usage(self.last_usage))


def error_event(error: GatewayError, sequence: int) -> bytes:
    """The Responses API's ``error`` event for a mapped ``error``, numbered ``sequence``."""
    event = {"type": "error", "sequence_number": sequence, "code": error.code or error.error_type,
             "message": error.message, "param": error.param}
    return b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"


def event_type(event: bytes) -> str:
    """An event's type: its ``event:`` line (OpenAI names every event so), else its data's ``type``."""
    named = EVENT_LINE.search(event)
    if named:
        return named.group(1).strip().decode("utf-8", errors="replace")
    try:
        kind = orjson.loads(sse.data(event)).get("type")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    return kind if isinstance(kind, str) else ""


def usage(content: bytes) -> dict[str, Any] | None:
    """The ``usage`` of a Responses object; None when it has none."""
    try:
        found = orjson.loads(content).get("usage")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return found if isinstance(found, dict) else None


def _event_usage(event: bytes) -> dict[str, Any] | None:
    try:
        response = orjson.loads(sse.data(event)).get("response")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    found = response.get("usage") if isinstance(response, dict) else None
    return found if isinstance(found, dict) else None
