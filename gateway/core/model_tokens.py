"""The target model's tokens: what the gateway's counts, budgets and ``x-mixpr-*`` headers are in.

The gateway counts every text with tiktoken (fast, in-process, in the workers for long texts). That
is exact for the OpenAI models tiktoken knows. For every other model the count is multiplied by
``1 + token_margin`` (:attr:`gateway.compress.policy.Target.scale`), as their tokenizers cut text finer:
SmolLM2 counts 1.01-1.23x cl100k on 19 real documents (1.08x overall), German prose 1.28x, JSON
1.42x, digit strings 2.5x. Claude's and Llama's tokenizers are not available offline (LiteLLM's
bundled Claude tokenizer is Claude 2's, and it downloads Llama's from the Hugging Face hub).

A model whose server the gateway runs itself (``managed_server``, llama.cpp) is counted exactly:
what is about to be sent goes through that server's own chat template and tokenizer
(``/apply-template``, ``/tokenize``), and when it does not fit, the request is prepared again with
the scale this count implies (``gateway.core.chat``). What is counted there is what is sent, so it is
never longer than about a window, and both calls are I/O for the event loop.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx

from gateway.config import MixprSettings, ModelEntry
from mixpr.tokens import has_encoding

log = logging.getLogger("gateway.core.model_tokens")

# Every model that tiktoken does not know and that has no server of its own to count with. Covers
# each of the 19 real documents measured with SmolLM2 (at most 1.23x); see the README for others.
DEFAULT_MARGIN = 0.25
# A prepared-again request aims this much under the window: the kept text's ratio differs a little
# from the whole prompt's.
CALIBRATION_SLACK = 0.03
COUNT_TIMEOUT_S = 10.0


def margin(entry: ModelEntry, settings: MixprSettings) -> float:
    """``token_margin`` if set; else 0 for models counted exactly (tiktoken's or a managed server's)."""
    if settings.token_margin is not None:
        return settings.token_margin
    return 0.0 if has_encoding(entry.upstream_model) or entry.managed_server else DEFAULT_MARGIN


def calibrated(scale: float, estimated: int, exact: int) -> float:
    """The scale that would have estimated ``exact`` (plus the slack) where ``scale`` gave ``estimated``."""
    return scale * exact / max(1, estimated) * (1 + CALIBRATION_SLACK)


def server_counters(entries: list[ModelEntry]) -> dict[str, ServerCounter]:
    """A counter for each model whose server the gateway runs, at the address requests go to."""
    return {entry.model_name: ServerCounter(entry.litellm_params["api_base"]) for entry in entries
            if entry.managed_server and isinstance(entry.litellm_params.get("api_base"), str)}


class ServerCounter:
    """A chat request's prompt tokens as a llama.cpp server counts them (template included)."""

    def __init__(self, base_url: str) -> None:
        self.root = base_url.removesuffix("/").removesuffix("/v1")
        self._client: httpx.AsyncClient | None = None

    async def count(self, messages: list[dict[str, Any]], tools: Any = None) -> int | None:
        """The exact count, or None when the server cannot say (then the estimate stands)."""
        body: dict[str, Any] = {"messages": messages, **({"tools": tools} if tools else {})}
        try:
            prompt = (await self._post("/apply-template", body)).json()["prompt"]
            tokens = await self._post("/tokenize", {"content": prompt, "add_special": True})
            return _length(tokens.content)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning("counting with the model server failed (%s); using the estimate", type(exc).__name__)
            return None

    async def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        if self._client is None:  # made on first use, on the loop that serves requests
            self._client = httpx.AsyncClient(base_url=self.root, timeout=COUNT_TIMEOUT_S, trust_env=False)
        response = await self._client.post(path, content=json.dumps(body), headers=_JSON)
        response.raise_for_status()
        return response

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


_JSON = {"Content-Type": "application/json"}


def _length(body: bytes) -> int:
    """Items of ``{"tokens": [1, 2, ...]}``: llama.cpp's compact answer by its commas, so a window's
    worth of numbers is never parsed on the event loop; any other shape parsed."""
    if body.startswith(b'{"tokens":[') and body.endswith(b"]}"):
        return 0 if body == b'{"tokens":[]}' else body.count(b",") + 1
    return len(json.loads(body)["tokens"])
