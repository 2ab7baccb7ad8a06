"""The raw relay: an Anthropic Messages request sent to an Anthropic upstream as the client sent it.

LiteLLM would take the request apart into OpenAI chat messages and build a new one, which loses
blocks and flags it has no field for (``document`` sources, ``search_result``, ``is_error``,
``citations``, ``context_management``, unknown betas). When the client and the upstream speak the
same wire format there is nothing to translate: the body goes out with only the model name (and any
compressed texts) changed, the client's ``anthropic-version`` and ``anthropic-beta`` headers with it,
and the upstream's answer (JSON, server-sent events, or its own error) comes back byte for byte.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import litellm

from gateway.config import ModelEntry
from gateway.errors import UpstreamError
from gateway.run import offload

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
    stream: AsyncIterator[bytes] | None = None


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


def headers(entry: ModelEntry, client: Mapping[str, str]) -> dict[str, str]:
    key = entry.litellm_params.get("api_key") or os.environ.get("ANTHROPIC_API_KEY") or ""
    out = {"content-type": "application/json", "x-api-key": str(key),
           "anthropic-version": client.get("anthropic-version") or DEFAULT_VERSION}
    if client.get("anthropic-beta"):
        out["anthropic-beta"] = client["anthropic-beta"]
    return out


def pool() -> httpx.AsyncClient:
    """One pooled client for every relayed request of an app (its owner closes it): a client per
    request would open a new TLS connection to the provider each time."""
    return httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_keepalive_connections=32))


async def send(http: httpx.AsyncClient, entry: ModelEntry, body: dict[str, Any], client: Mapping[str, str], *,
               query: str, timeout: float) -> Relayed:
    """POST ``body`` to ``entry``'s Messages endpoint through ``http`` (see :func:`pool`). A streamed
    answer is handed back open (read ``stream`` to the end, or close it); an error status comes back
    with the upstream's body."""
    data = await offload.inline_or_run(offload.is_big(body), _encoded, body)
    request = http.build_request("POST", url(entry, query), content=data, headers=headers(entry, client),
                                 timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))
    try:
        response = await http.send(request, stream=True)
    except httpx.TimeoutException:
        raise UpstreamError("The upstream model did not answer in time.", status_code=504,
                            code="upstream_timeout") from None
    except httpx.HTTPError:
        raise UpstreamError("Could not reach the upstream model (connection failed).", status_code=502,
                            code="upstream_connection_error") from None
    passed = {k: v for k, v in response.headers.items() if k.lower() in REPLY_HEADERS}
    if response.status_code >= 400 or not body.get("stream"):
        try:
            content = await response.aread()
        finally:
            await response.aclose()
        return Relayed(response.status_code, passed, content=content)
    return Relayed(response.status_code, passed, stream=_bytes(response))


def _encoded(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def usage(content: bytes) -> dict[str, Any] | None:
    """The ``usage`` of a non-streamed Messages answer, for the metrics; None if it has none."""
    try:
        found = json.loads(content).get("usage")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, dict) else None


async def _bytes(response: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.aiter_bytes():
            yield chunk
    except httpx.HTTPError:  # the upstream went away midway: Anthropic's in-band error event
        error = {"type": "error", "error": {"type": "api_error",
                                           "message": "The upstream stream broke off (connection failed)."}}
        yield f"event: error\ndata: {json.dumps(error)}\n\n".encode()
    finally:
        await response.aclose()
