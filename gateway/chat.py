"""One chat completion: validate the request, compress it when needed, forward it.

Kept apart from ``app`` so the HTTP layer stays a thin shell: this module knows the OpenAI
request shape and the gateway's policy, not routes or status lines.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway import upstream
from gateway.compression import Compressor, Control, Outcome, Router, Target
from gateway.config import GatewayConfig, ModelEntry, max_input_tokens
from gateway.errors import BadRequest, ModelNotFound
from gateway.metrics import Metrics
from mixpr import ROUTES

log = logging.getLogger("gateway.chat")

CONTROL_KEYS = ("enabled", "route", "budget_tokens")
MIN_BUDGET = 16
ROUTER_MAX_TOKENS = 2  # "y" or "n", with room for a tokenizer that splits off a leading space


@dataclass
class ChatService:
    config: GatewayConfig
    compressor: Compressor
    metrics: Metrics

    def __post_init__(self) -> None:
        default = self.config.general_settings.default_max_input_tokens
        # Looked up once: LiteLLM's model map is a large dict, and windows do not change.
        self.windows = {m.model_name: max_input_tokens(m, default) for m in self.config.model_list}
        self.settings = {m.model_name: m.settings(self.config.mixpr_settings) for m in self.config.model_list}
        self.routers = {m.model_name: self._router(m.model_name) for m in self.config.model_list}

    async def handle(self, body: Any, headers: Mapping[str, str]) -> Response:
        started = time.perf_counter()
        entry, messages = self._validate(body)
        control = parse_control(body.get("mixpr"), headers)
        settings = self.settings[entry.model_name]
        target = Target(entry.upstream_model, self.windows[entry.model_name], _reserve(body, settings))
        outcome = await self.compressor.prepare(
            messages, tools=body.get("tools"), target=target, settings=settings, control=control,
            router=self.routers.get(settings.router_model or entry.model_name),
        )
        self._record(entry.model_name, outcome, started)
        return await self._forward(entry, body, outcome)

    def _record(self, model: str, outcome: Outcome, started: float) -> None:
        self.metrics.record_chat(model, outcome.action, outcome.original_tokens, outcome.final_tokens,
                                 outcome.route, outcome.compress_ms)
        log.info("chat model=%s action=%s tokens=%d->%d route=%s compress_ms=%s gateway_ms=%.1f",
                 model, outcome.action, outcome.original_tokens, outcome.final_tokens,
                 outcome.route, _ms(outcome.compress_ms), (time.perf_counter() - started) * 1000)

    async def _forward(self, entry: ModelEntry, body: dict[str, Any], outcome: Outcome) -> Response:
        timeout = self.config.general_settings.request_timeout_s
        kwargs = upstream.build_call(entry, body, outcome.messages, timeout=timeout)
        report = report_headers(outcome)
        if body.get("stream"):
            stream = await upstream.open_stream(kwargs)
            sse_headers = {**report, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
            return StreamingResponse(upstream.sse_events(stream), media_type="text/event-stream",
                                     headers=sse_headers)
        return JSONResponse(await upstream.complete(kwargs), headers=report)

    def _router(self, model_name: str) -> Router | None:
        """How workers ask ``model_name`` the auto router's question (deterministic, 2 tokens)."""
        entry = self.config.model(model_name)
        if entry is None:
            return None  # config validation names unknown router models; this is belt and braces
        timeout = self.settings[model_name].router_timeout_s
        body = {"max_tokens": ROUTER_MAX_TOKENS, "temperature": 0}
        kwargs = upstream.build_call(entry, body, [], timeout=timeout)
        del kwargs["messages"]
        return Router(name=model_name, kwargs=kwargs, timeout=timeout)

    def _validate(self, body: Any) -> tuple[ModelEntry, list[dict[str, Any]]]:
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise BadRequest("You must provide a model parameter.", param="model")
        messages = validate_messages(body.get("messages"))
        validate_params(body)
        entry = self.config.model(model)
        if entry is None:
            raise ModelNotFound(f"The model `{model}` does not exist on this gateway.", param="model")
        return entry, messages


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array of message objects.", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a string 'role'.", param=f"messages[{i}]")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise BadRequest(f"messages[{i}].content must be a string, an array of parts or null.",
                             param=f"messages[{i}].content")
    return messages


def validate_params(body: dict[str, Any]) -> None:
    """Only what the gateway itself relies on; everything else is the upstream's to judge."""
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean.", param="stream")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and not _is_int_at_least(value, 1):
            raise BadRequest(f"'{key}' must be a positive integer.", param=key)


def parse_control(field: Any, headers: Mapping[str, str]) -> Control:
    """Per-request switches: the ``mixpr`` body field, else the ``x-mixpr-*`` headers."""
    raw: dict[str, Any] = {}
    for key in CONTROL_KEYS:
        header = headers.get("x-mixpr-" + key.replace("_", "-"))
        if header is not None:
            raw[key] = _from_header(key, header)
    if field is not None:
        if not isinstance(field, dict):
            raise BadRequest("'mixpr' must be an object.", param="mixpr")
        unknown = sorted(set(field) - set(CONTROL_KEYS))
        if unknown:
            valid = ", ".join(CONTROL_KEYS)
            raise BadRequest(f"Unknown mixpr option(s): {', '.join(unknown)}; valid: {valid}.",
                             param=f"mixpr.{unknown[0]}")
        raw.update(field)
    return _checked_control(raw)


def _from_header(key: str, value: str) -> Any:
    text = value.strip().lower()
    if key == "enabled":
        return {"true": True, "1": True, "false": False, "0": False}.get(text, value)
    if key == "budget_tokens":
        return int(text) if text.isdigit() else value
    return text


def _checked_control(raw: dict[str, Any]) -> Control:
    enabled, route, budget = raw.get("enabled"), raw.get("route"), raw.get("budget_tokens")
    if enabled is not None and not isinstance(enabled, bool):
        raise BadRequest("mixpr.enabled must be true or false.", param="mixpr.enabled")
    if route is not None and route not in ROUTES:
        raise BadRequest(f"mixpr.route must be one of {', '.join(ROUTES)}.", param="mixpr.route")
    if budget is not None and not _is_int_at_least(budget, MIN_BUDGET):
        raise BadRequest(f"mixpr.budget_tokens must be an integer >= {MIN_BUDGET}.",
                         param="mixpr.budget_tokens")
    return Control(enabled=enabled, route=route, budget_tokens=budget)


def _is_int_at_least(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _reserve(body: dict[str, Any], settings: Any) -> int:
    """Tokens kept free for the reply: what the client asked for, else the configured reserve."""
    asked = body.get("max_completion_tokens") or body.get("max_tokens")
    return int(asked) if asked else settings.completion_reserve_tokens


def report_headers(outcome: Outcome) -> dict[str, str]:
    return {
        "x-mixpr-action": outcome.action,
        "x-mixpr-original-tokens": str(outcome.original_tokens),
        "x-mixpr-compressed-tokens": str(outcome.final_tokens),
        "x-mixpr-route": outcome.route or "none",
        "x-mixpr-compress-ms": _ms(outcome.compress_ms),
    }


def _ms(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "0"
