"""The raw relay: an Anthropic Messages request sent to an Anthropic upstream as the client sent it.

LiteLLM would take the request apart into OpenAI chat messages and build a new one, which loses
blocks and flags it has no field for (``document`` sources, ``search_result``, ``is_error``,
``citations``, ``context_management``, unknown betas). When the client and the upstream speak the
same wire format there is nothing to translate: the body goes out with only the model name (and any
compressed texts) changed, the client's ``anthropic-version`` and allowed ``anthropic-beta`` headers
with it, and the upstream's answer (JSON, whole server-sent events, or its own error) comes back byte
for byte but for its ``model``, which names the model the client asked for. It goes through the app's
one upstream client (``gateway.upstream.http``), as the chat relay's requests do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import litellm

from gateway.config import ModelEntry
from gateway.run import offload
from gateway.upstream import forward, http, redaction, shapes, sse, statuses
from gateway.upstream.betas import Betas

DEFAULT_BASE = "https://api.anthropic.com"
DEFAULT_VERSION = "2023-06-01"
CLIENT_HEADERS = ("anthropic-version", "anthropic-beta")
REPLY_HEADERS = ("content-type", "retry-after", "request-id", "x-request-id")


@dataclass
class Relayed:
    """The upstream's status, the headers worth passing on, and its body (bytes, or a stream of them)."""

    status: int
    headers: dict[str, str]
    content: bytes = b""
    stream: MessageEvents | None = None


def is_anthropic(entry: ModelEntry) -> bool:
    """Whether ``entry`` is served by LiteLLM's Anthropic provider (so it speaks Messages natively)."""
    try:
        return litellm.get_llm_provider(entry.upstream_model)[1] == "anthropic"
    except Exception:  # an unknown provider: not Anthropic's wire format
        return False


def model_name(entry: ModelEntry) -> str:
    return litellm.get_llm_provider(entry.upstream_model)[0]


def url(entry: ModelEntry, query: str = "") -> str:
    base = str(entry.litellm_params.get("api_base") or DEFAULT_BASE).rstrip("/")
    if not base.endswith("/v1/messages"):
        base += "/messages" if base.endswith("/v1") else "/v1/messages"
    return f"{base}?{query}" if query else base


def headers(entry: ModelEntry, client: Mapping[str, str], betas: Betas) -> dict[str, str]:
    """The upstream's headers: the deployment's key, the client's ``anthropic-version`` and those of
    its ``anthropic-beta`` flags the operator allows (``gateway.upstream.betas``)."""
    key = entry.litellm_params.get("api_key") or os.environ.get("ANTHROPIC_API_KEY") or ""
    out = {"content-type": "application/json", "x-api-key": str(key),
           "anthropic-version": client.get("anthropic-version") or DEFAULT_VERSION}
    allowed = betas.header(client.get("anthropic-beta"))
    if allowed:
        out["anthropic-beta"] = allowed
    return out


async def send(client: http.Client, entry: ModelEntry, body: dict[str, Any], headers: Mapping[str, str], *,
               query: str, timeout: float, model: str) -> Relayed:
    """POST ``body`` to ``entry``'s Messages endpoint through the app's upstream ``client``. A streamed
    answer is handed back open (read its ``stream`` to the end, or close it); an error status comes
    back with the upstream's body redacted (``redaction.redact_body``), except 401/403
    (``forward.auth_failed``: the operator's credentials, whose error text never reaches a client).
    ``model`` is the name the answer gives."""
    data = await offload.inline_or_run(offload.is_big(body), _encoded, body)
    response = await client.post(url(entry, query), data, headers, http.phases(timeout))
    passed = {k: v for k, v in response.headers.items() if k.lower() in REPLY_HEADERS}
    if response.status in forward.AUTH_STATUSES:
        await http.read(response, 0)
        raise forward.auth_failed(response.status)
    if response.status >= 400:  # Anthropic's own error shape, its text redacted as on every path
        return Relayed(response.status, {**passed, "content-type": "application/json"},
                       content=_error_body(response.status, await http.read(response)))
    if not body.get("stream"):
        raw = await http.read(response)
        problem = statuses.answer_problem(raw)
        if problem is not None:  # a 2xx that is Anthropic's {"type": "error"}, or no JSON: as its event
            return Relayed(problem.status_code, {**passed, "content-type": "application/json"},
                           content=_encoded(sse.anthropic_error(problem)))
        return Relayed(response.status, passed, content=shapes.renamed(raw, shapes.MESSAGE, model))
    return Relayed(response.status, passed,
                   stream=MessageEvents(response, model, client.policy.max_event_bytes))


class MessageEvents(sse.Events):
    """Anthropic's events as the upstream sent them, whole events at a time, but for the ``model``
    of ``message_start`` (``shapes.MESSAGE_EVENT``); ``ended_well`` once ``message_stop`` came."""

    def __init__(self, response: Any, model: str, max_event_bytes: int = sse.MAX_EVENT_BYTES) -> None:
        super().__init__(response, max_event_bytes)
        self.model = model
        self.ended_well = False

    def edit(self, event: bytes) -> bytes:
        self.ended_well = self.ended_well or b"message_stop" in event
        return shapes.renamed_event(sse.error_event(event, anthropic=True), shapes.MESSAGE_EVENT, self.model)

    def answer(self, payload: dict[str, Any]) -> list[bytes]:
        """A whole Message as the events of its stream: message_start, each block, message_delta
        (the stop reason), message_stop."""
        blocks = payload.get("content") if isinstance(payload.get("content"), list) else []
        started = {**payload, "content": [], "stop_reason": None, "stop_sequence": None}
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": started})]
        for index, block in enumerate(b for b in blocks if isinstance(b, dict)):
            events += _block_events(index, block)
        stop = {"stop_reason": payload.get("stop_reason"), "stop_sequence": payload.get("stop_sequence")}
        usage = payload.get("usage") or {}
        events += [("message_delta", {"delta": stop, "usage": usage}), ("message_stop", {})]
        return [f"event: {kind}\ndata: ".encode() + _encoded({"type": kind, **fields}) + b"\n\n"
                for kind, fields in events]


def _block_events(index: int, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """One content block's events: a text's text and a tool call's input as their deltas (what
    clients print and parse), any other block whole in its start."""
    kind = block.get("type")
    if kind == "text":
        start, delta = {**block, "text": ""}, {"type": "text_delta", "text": block.get("text") or ""}
    elif kind in ("tool_use", "server_tool_use"):
        partial = json.dumps(block.get("input") or {}, ensure_ascii=False)
        start, delta = {**block, "input": {}}, {"type": "input_json_delta", "partial_json": partial}
    else:
        start, delta = block, None
    events = [("content_block_start", {"index": index, "content_block": start})]
    if delta is not None:
        events.append(("content_block_delta", {"index": index, "delta": delta}))
    return [*events, ("content_block_stop", {"index": index})]


def _error_body(status: int, raw: bytes) -> bytes:
    """The upstream's error body redacted; a body that is not Anthropic's JSON (a proxy's error page)
    in Anthropic's error shape, which the client parses."""
    try:
        is_anthropic_error = isinstance(json.loads(raw), dict)
    except ValueError:
        is_anthropic_error = False
    if is_anthropic_error:
        return redaction.redact_body(raw)
    kind = "api_error" if status >= 500 else "invalid_request_error"
    text = raw.decode("utf-8", errors="replace").strip() or f"Upstream error ({status})."
    return _encoded({"type": "error", "error": {"type": kind, "message": redaction.redact_text(text)}})


def _encoded(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def usage(content: bytes) -> dict[str, Any] | None:
    """The ``usage`` of a non-streamed Messages answer, for the metrics; None if it has none."""
    try:
        found = json.loads(content).get("usage")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, dict) else None
