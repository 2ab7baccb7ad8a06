"""MixPR inside a LiteLLM proxy: the gateway's chat core behind LiteLLM's ``CustomGuardrail``.

Registered in the proxy's config (``guardrail: gateway.plugins.litellm_guardrail.MixPRGuardrail``,
``mode: pre_call``); the extra ``litellm_params`` keys are this project's ``mixpr_settings`` and the
pool and cache keys of its ``general_settings`` (``POOL_KEYS``). LiteLLM hands ``apply_guardrail``
the request's texts and its messages as OpenAI chat rows, for chat completions, Responses and
Anthropic Messages; the answer is ``texts``, which LiteLLM writes back block by block, so every
block keeps its type and flags (``gateway.core.guardrail``; checked against litellm 1.106).

Nothing is reimplemented: each model group of the proxy's ``model_list`` gets a ``Preparer`` whose
one model is the group (its window from LiteLLM's model info, the smallest among the group's
deployments, else ``default_max_input_tokens``), and ``Preparer.prepare`` decides what is sent,
exactly as for the gateway's own endpoints. All groups share one worker pool, one conversation
cache and one set of metrics; a model the proxy does not list passes through untouched and leaves
no trace (the router refuses it next). MixPR runs in the worker pool, never on the proxy's event
loop.

The plug-in changes nothing in its host: it imports the core only, never the gateway's HTTP layer
or its forwarding module, so LiteLLM's and the openai SDK's globals stay as the proxy set them.

It fails open: a compression error, a timeout or a full pool forwards the original request and
counts it in ``mixpr_guardrail_failed_open_total{cause}``. The outcome is kept by the request's
``litellm_call_id`` until LiteLLM asks for response headers, so the ``x-mixpr-*`` headers reach
the client.
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

from gateway.compress.compressor import Compressor, Outcome
from gateway.config import ConfigError, GatewayConfig, GeneralSettings, MixprSettings, ModelEntry
from gateway.conversation import shared_forms
from gateway.conversation.history import History
from gateway.core.guardrail import (
    REPLY_LIMITS,
    Layout,
    answer,
    control_from,
    failed_headers,
    failure_code,
    guardrail_messages,
    layout,
    reply_params,
)
from gateway.core.prepare import ChatCall, Preparer, report_headers
from gateway.core.reply import forwarded
from gateway.metrics import Metrics
from gateway.run.workers import Workers

log = logging.getLogger("gateway.plugins.litellm_guardrail")

# Self-Route asks the model again after its answer: a pre-call guardrail never sees the answer.
MIXPR_KEYS = tuple(k for k in MixprSettings.model_fields if k != "self_route")
# Every general setting of the worker pool, the caches and the default window.
POOL_KEYS = ("compression_workers", "compression_executor", "compression_timeout_s",
             "max_queued_compressions", "route_cache_size", "prefix_cache_bytes", "default_max_input_tokens")
MAX_PENDING_REPORTS = 10_000  # outcomes waiting for their response headers; a failed call never asks
# What LiteLLM does not write back from a guardrail's answer when left out: its tools and tool calls
# (returned, they are converted to OpenAI's shape and back, which Anthropic tools do not survive whole).
NOT_RETURNED = ("tools", "tool_calls", "images")


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
        # model group -> ((window, tokenizer model), its preparer): one per group the proxy lists.
        self._services: dict[str, tuple[tuple[int, str], Preparer]] = {}
        self._compressor: Compressor | None = None
        self._history: History | None = None
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
        """``texts`` with the conversation compressed, or as they came when nothing changed; never the
        tools, tool calls or images, which LiteLLM then leaves as they are."""
        messages = guardrail_messages(inputs)
        if input_type != "request" or not messages:
            return inputs
        untouched = {k: v for k, v in inputs.items() if k not in NOT_RETURNED}
        try:
            prepared = await self._prepare(inputs, request_data, messages)
        except Exception as exc:  # a plug-in bug or a dead pool must not cost the proxy an answer
            self.metrics.guardrail_failed_open.labels(failure_code(exc)).inc()
            self._remember(request_data, failed_headers(exc))
            return untouched
        if prepared is None:  # a model the proxy does not list: its router answers for it
            return untouched
        plan, outcome = prepared
        self._remember(request_data, report_headers(outcome))
        if outcome.failed_open:  # the pool failed and the original fits: it goes on as it came
            self.metrics.guardrail_failed_open.labels("compression_failed").inc()
        if outcome.action != "compressed":
            return untouched
        return {**untouched, **answer(plan, outcome)}

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
                       messages: list[dict[str, Any]]) -> tuple[Layout, Outcome] | None:
        model = str(request_data.get("model") or inputs.get("model"))
        psr = request_data.get("proxy_server_request") or {}
        # The ``mixpr`` body field is the gateway's, not the model's: it never reaches the provider.
        control = control_from(psr.get("headers"), request_data.pop("mixpr", None))
        service = await self._service(model)
        if service is None:
            return None
        name, preparer = service
        plan = layout(inputs, messages, failed_tool_ids(request_data))
        if plan.unpaired:
            log.info("mixpr guardrail: %d message(s) of a %s request have text LiteLLM cannot write back "
                     "in place; they are sent whole", plan.unpaired, name)
            self.metrics.guardrail_kept_whole.labels("no_write_back").inc(plan.unpaired)
        call = ChatCall(name, plan.messages, reply_params(request_data, inputs.get("tools")), control)
        outcome = await preparer.prepare(call)
        # LiteLLM calls the model with ``request_data``: a lowered reply limit goes there.
        request_data.update(forwarded(request_data, outcome.max_tokens, REPLY_LIMITS))
        return plan, outcome

    def _remember(self, request_data: Mapping[str, Any], headers: dict[str, str]) -> None:
        call_id = request_data.get("litellm_call_id")
        if not isinstance(call_id, str):
            return
        self._reports[call_id] = headers
        while len(self._reports) > MAX_PENDING_REPORTS:
            self._reports.popitem(last=False)

    async def _service(self, model: str) -> tuple[str, Preparer] | None:
        """The model group ``model`` routes to and its preparer, built once per group (again only if its
        window or tokenizer changed); None for a model the proxy's ``model_list`` does not hold."""
        found = _deployment(model, self.pool_settings.default_max_input_tokens)
        if found is None:
            return None
        name, upstream, window, params = found
        key = (window, upstream)
        known = self._services.get(name)
        if known is not None and known[0] == key:
            return name, known[1]
        entry = ModelEntry(model_name=name, litellm_params=params, model_info={"max_input_tokens": window})
        config = GatewayConfig(model_list=[entry], mixpr_settings=self.mixpr_settings,
                               general_settings=self.pool_settings)
        compressor = await self._pool()
        if self._history is None:
            self._history = History(compressor, cache_bytes=self.pool_settings.prefix_cache_bytes,
                                    metrics=self.metrics,
                                    shared=shared_forms.from_settings(self.pool_settings, self.metrics))
        preparer = Preparer(config, compressor, self.metrics, history=self._history)
        self._services[name] = (key, preparer)
        return name, preparer

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


def failed_tool_ids(request_data: Mapping[str, Any]) -> set[str]:
    """The ids of Anthropic tool results marked ``is_error`` in the request LiteLLM is about to send."""
    found = set()
    for message in request_data.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("is_error"):
                found.add(str(block.get("tool_use_id")))
    return found


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


def _deployment(model: str, default_window: int) -> tuple[str, str, int, dict[str, Any]] | None:
    """The model group, tokenizer model, window and ``litellm_params`` of ``model``'s deployments in
    the proxy; None when the proxy's router lists none.

    A group of several deployments gets the smallest window, so the prompt fits whichever the
    router picks.
    """
    deployments = _router_deployments(model)
    if not deployments:
        return None
    name = str(deployments[0].get("model_name") or model)
    windows = [w for w in (_window(model, d) for d in deployments) if w]
    params = dict(deployments[0].get("litellm_params") or {})
    params["model"] = params.get("model") or model
    return name, params["model"], min(windows, default=default_window), params


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
