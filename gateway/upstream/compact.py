"""OpenAI's ``POST /v1/responses/compact`` relayed as bytes to the deployment's upstream.

Compaction is the provider's own: the upstream reads the conversation and returns opaque, encrypted
``compaction`` items that only it can read back. The gateway does not compress such a request (the
point of it is the provider's summary) and does not translate it: the body goes to
``{api_base}/responses/compact`` with only the model name and the credentials changed, and the answer
comes back as it came. Only ``openai/`` deployments are sent (OpenAI has it; an OpenAI-compatible
server may); anything else has no such endpoint (``target`` is None).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.config import ModelEntry
from gateway.upstream import http
from gateway.upstream.chat_relay import openai_base, openai_headers

PATH = "/responses/compact"


@dataclass(frozen=True)
class Target:
    url: str
    model: str  # the name the upstream knows
    headers: dict[str, str]


def target(entry: ModelEntry) -> Target | None:
    """Where ``entry``'s compaction goes, or None when its provider has no compaction endpoint."""
    provider, _, name = entry.upstream_model.partition("/")
    if provider != "openai" or not name:
        return None
    params = entry.litellm_params
    key = params.get("api_key") or os.environ.get("OPENAI_API_KEY") or ""
    return Target(str(openai_base(params)).rstrip("/") + PATH, name, openai_headers(str(key), params))


async def relay(client: http.Client, to: Target, body: dict[str, Any], seconds: float) -> tuple[int, bytes]:
    """The upstream's status and body for ``body`` (its own error body when it refused)."""
    response = await client.post(to.url, orjson.dumps({**body, "model": to.model}), to.headers,
                                 http.phases(seconds))
    return response.status, await http.read(response)
