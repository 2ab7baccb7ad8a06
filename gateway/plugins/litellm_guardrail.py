"""MixPR inside a LiteLLM proxy: the gateway's chat core behind LiteLLM's ``CustomGuardrail``.

Registered in the proxy's config (``guardrail: gateway.plugins.litellm_guardrail.MixPRGuardrail``,
``mode: pre_call``); the extra ``litellm_params`` keys are this project's ``mixpr_settings`` (and a
few ``general_settings`` of the worker pool). LiteLLM hands ``apply_guardrail`` the request as
OpenAI chat messages for chat completions, Responses and Anthropic Messages, and writes a *new*
list returned in ``structured_messages`` back into the request (checked against litellm 1.106).

Nothing is reimplemented: each model group gets a ``ChatService`` whose one model is the group's
deployment (its window from LiteLLM's model info, the smallest among the group's deployments,
else ``default_max_input_tokens``), and ``ChatService.prepare`` decides what is sent, exactly as
for the gateway's own endpoints. MixPR runs in the gateway's worker pool, never on the proxy's
event loop. The outcome is kept by the request's ``litellm_call_id`` until LiteLLM asks for
response headers, so the ``x-mixpr-*`` headers reach the client. Whatever fails, the prompt goes on
as it was: a compression plug-in must never cost the proxy an answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Coroutine, Mapping
from typing import Any, Literal

from litellm.integrations.custom_guardrail import CustomGuardrail
from litellm.types.guardrails import GuardrailEventHooks
from pydantic import ValidationError

from gateway.api.guardrail_api import (
    control_from,
    failed_headers,
    guardrail_messages,
    reply_params,
    rewritten_fields,
)
from gateway.compress.compressor import Compressor, Outcome
from gateway.config import ConfigError, GatewayConfig, GeneralSettings, MixprSettings, ModelEntry
from gateway.core.chat import ChatCall, ChatService, report_headers
from gateway.metrics import Metrics
from gateway.run.workers import Workers

log = logging.getLogger("gateway.plugins.litellm_guardrail")

# Self-Route asks the model again after its answer: a pre-call guardrail never sees the answer.
MIXPR_KEYS = tuple(k for k in MixprSettings.model_fields if k != "self_route")
POOL_KEYS = ("compression_workers", "compression_executor", "compression_timeout_s",
             "max_queued_compressions", "route_cache_size", "default_max_input_tokens")
MAX_PENDING_REPORTS = 10_000  # outcomes waiting for their response headers; a failed call never asks


class MixPRGuardrail(CustomGuardrail):
    """Compresses over-long prompts before the proxy calls the model; reports in ``x-mixpr-*``."""

    def __init__(self, **kwargs: Any) -> None:
        if kwargs.get("self_route"):
            raise ConfigError("mixpr guardrail: self_route is not available in a pre-call guardrail")
        mixpr = {k: kwargs.pop(k) for k in MIXPR_KEYS if k in kwargs}
        pool = {k: kwargs.pop(k) for k in POOL_KEYS if k in kwargs}
        kwargs.pop("self_route", None)
        self.mixpr_settings, self.pool_settings = _validated(mixpr, pool)
        kwargs.setdefault("supported_event_hooks", [GuardrailEventHooks.pre_call])
        super().__init__(**kwargs)
        self._services: dict[tuple[str, int, str], ChatService] = {}
        self._compressor: Compressor | None = None
        self._starting: asyncio.Lock | None = None
        self._reports: OrderedDict[str, dict[str, str]] = OrderedDict()
        self.metrics = Metrics()
        self._warming = _start_soon(self._pool())


    async def apply_guardrail(
        self,
        inputs: Any,
        request_data: dict,
        input_type: Literal["request", "response"],
        logging_obj: Any = None,
    ) -> Any:
        """The inputs with the conversation compressed, or the very same inputs when nothing changed."""
        messages = guardrail_messages(inputs)
        if input_type != "request" or not messages:
            return inputs
        try:
            outcome = await self._prepare(inputs, request_data, messages)
        except Exception as exc:  # a plug-in bug or a dead pool must not cost the proxy an answer
            self._remember(request_data, failed_headers(exc))
            return inputs
        self._remember(request_data, report_headers(outcome))
        if outcome.action != "compressed":
            return inputs  # LiteLLM rewrites the request only for a new object
        return {**inputs, **rewritten_fields(inputs, outcome)}

    async def async_post_call_response_headers_hook(
        self,
        data: dict,
        user_api_key_dict: Any,
        response: Any,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, object] | None = None,
    ) -> dict[str, str] | None:
        call_id = data.get("litellm_call_id")
        return self._reports.pop(call_id, None) if isinstance(call_id, str) else None

    async def _prepare(self, inputs: Mapping[str, Any], request_data: dict,
                       messages: list[dict[str, Any]]) -> Outcome:
        model = request_data.get("model") or inputs.get("model")
        psr = request_data.get("proxy_server_request") or {}
        # The ``mixpr`` body field is the gateway's, not the model's: it never reaches the provider.
        control = control_from(psr.get("headers"), request_data.pop("mixpr", None))
        service = await self._service(str(model))
        call = ChatCall(str(model), messages, reply_params(request_data, inputs.get("tools")), control)
        return await service.prepare(call)

    def _remember(self, request_data: Mapping[str, Any], headers: dict[str, str]) -> None:
        call_id = request_data.get("litellm_call_id")
        if not isinstance(call_id, str):
            return
        self._reports[call_id] = headers
        while len(self._reports) > MAX_PENDING_REPORTS:
            self._reports.popitem(last=False)

    async def _service(self, model: str) -> ChatService:
        """The chat core for ``model``'s deployment, built once per (model, window, tokenizer)."""
        upstream, window, params = _deployment(model, self.pool_settings.default_max_input_tokens)
        key = (model, window, upstream)
        if key not in self._services:
            entry = ModelEntry(model_name=model, litellm_params=params,
                               model_info={"max_input_tokens": window})
            config = GatewayConfig(model_list=[entry], mixpr_settings=self.mixpr_settings,
                                   general_settings=self.pool_settings)
            self._services[key] = ChatService(config, await self._pool(), self.metrics)
        return self._services[key]

    async def _pool(self) -> Compressor:
        """The worker pool, started on first use: it needs the proxy's running event loop."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._compressor is None:
                general = self.pool_settings
                workers = Workers(workers=general.compression_workers, executor=general.compression_executor,
                                  timeout_s=general.compression_timeout_s, metrics=self.metrics)
                compressor = Compressor(workers, route_cache_size=general.route_cache_size,
                                        max_queued=general.queued_compressions, metrics=self.metrics)
                await compressor.start(with_router=self.mixpr_settings.router == "auto")
                self._compressor = compressor
        return self._compressor


def _start_soon(pool: Coroutine[Any, Any, Compressor]) -> asyncio.Task[Compressor] | None:
    """Start the pool while the proxy starts (LiteLLM builds guardrails on its running loop), so the
    first long prompt does not wait seconds for workers; without a loop it starts on first use."""
    try:
        task = asyncio.get_running_loop().create_task(pool)
    except RuntimeError:
        pool.close()
        return None
    task.add_done_callback(_log_failure)
    return task


def _log_failure(task: asyncio.Task[Compressor]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("mixpr guardrail: the worker pool did not start (%s); retried on the first request",
                    type(task.exception()).__name__)


def _validated(mixpr: dict[str, Any], pool: dict[str, Any]) -> tuple[MixprSettings, GeneralSettings]:
    """The guardrail's settings, checked once at proxy start; a typo stops the proxy, naming the key."""
    try:
        return MixprSettings(**mixpr), GeneralSettings(**pool)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"mixpr guardrail: invalid litellm_params ({problems})") from None


def _deployment(model: str, default_window: int) -> tuple[str, int, dict[str, Any]]:
    """The tokenizer model, window and ``litellm_params`` of ``model``'s deployments in the proxy.

    A group of several deployments gets the smallest window, so the prompt fits whichever the
    router picks; a model the proxy's router does not know keeps the configured default.
    """
    deployments = _router_deployments(model)
    windows = [w for w in (_window(model, d) for d in deployments) if w]
    params = dict(deployments[0].get("litellm_params") or {}) if deployments else {}
    params["model"] = params.get("model") or model
    return params["model"], min(windows, default=default_window), params


def _router_deployments(model: str) -> list[dict[str, Any]]:
    from litellm.proxy import proxy_server  # the running proxy's router; absent outside a proxy

    router = getattr(proxy_server, "llm_router", None)
    return list(router.get_model_list(model_name=model) or []) if router is not None else []


def _window(model: str, deployment: dict[str, Any]) -> int | None:
    from litellm.proxy import proxy_server

    try:  # the config's model_info, else LiteLLM's model map for the deployment's model
        info = proxy_server.llm_router.get_router_model_info(deployment=deployment, received_model_name=model)
    except Exception:  # LiteLLM raises a bare Exception for a model its map does not know
        return None
    window = info.get("max_input_tokens")
    return window if isinstance(window, int) and window > 0 else None
