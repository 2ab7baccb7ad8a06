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
from gateway.upstream.statuses import answer_error, answer_problem

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


async def relay(client: http.Client, to: Target, body: dict[str, Any], seconds: float) -> bytes:
    """The upstream's answer to ``body``. A refusal raises what the chat path raises for the same
    answer (``statuses.answer_error``: mapped, redacted, 401/403 the gateway's 502
    ``upstream_auth_failed``), but for a 404/405 that does not name the model: a server without the
    path, :class:`NoEndpoint`."""
    response = await client.post(to.url, orjson.dumps({**body, "model": to.model}), to.headers,
                                 http.phases(seconds))
    content = await http.read(response)
    if 200 <= response.status < 300:
        problem = answer_problem(content)
        if problem is not None:  # a 2xx that is an error (or no JSON) leaves by the one exit too
            raise problem
        return content
    if response.status in (404, 405) and not _names_model(content, to.model):
        raise NoEndpoint(response.status)
    raise answer_error(to.url, to.model, response.status, response.headers, content)


class NoEndpoint(Exception):
    """The upstream answered 404 or 405 for the path itself: it has no compaction endpoint."""

    def __init__(self, status: int) -> None:
        super().__init__(f"its upstream answered {status} for {PATH}")
        self.status = status


def _names_model(content: bytes, model: str) -> bool:
    """Whether a 404's body is about the model (OpenAI's ``model_not_found``, naming it in any case),
    not the path."""
    text = content.decode("utf-8", errors="replace").lower()
    return "model_not_found" in text or model.lower() in text
