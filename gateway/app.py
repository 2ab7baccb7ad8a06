"""The FastAPI app: routes, auth, body limits, lifespan and the one place errors become responses."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any

import fastapi.routing
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, PlainTextResponse

from gateway.api import (
    anthropic_messages,
    compress_api,
    guardrail_api,
    openai_chat,
    openai_responses,
    passthrough,
    responses_compact,
)
from gateway.api.common import authorize, state
from gateway.compress.compressor import Compressor, needs_router, pool_for, router_models
from gateway.config import ConfigError, GatewayConfig, GeneralSettings
from gateway.core.after_response import AfterResponse
from gateway.core.chat import ChatService
from gateway.edge import exposure
from gateway.edge.admission import BodyBytesMiddleware
from gateway.edge.unexpected import UnexpectedErrors
from gateway.errors import GatewayError, ModelNotFound, error_json
from gateway.metrics import Metrics, MetricsMiddleware
from gateway.run.gate import Gate
from gateway.run.workers import Workers
from gateway.stats.opening import Stats, open_stats
from gateway.ui import routes as ui_routes
from gateway.upstream import patches, redaction, responses_relay, warm

if TYPE_CHECKING:
    from gateway.local.managed import EarlyServers

log = logging.getLogger("gateway.app")

router = APIRouter()
CLIENT_CLOSED = 499
NO_TELEMETRY = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}


class GatewayState:
    """Everything a request needs, built once per app; services start in the lifespan."""

    def __init__(self, config: GatewayConfig, host: str, workers: Workers | None = None,
                 managed: EarlyServers | None = None) -> None:
        self.config = config
        self._early = workers  # a pool the CLI made and started early (gateway.starting); used once
        self._early_managed = managed  # model servers the CLI launched early, likewise; used once
        self.loopback_only = exposure.is_loopback(host)  # then Host must name loopback too
        self.metrics = Metrics()
        self.chat: ChatService | None = None
        self.stats: Stats | None = None  # the operator's page's store (gateway.stats), open while serving
        self.managed: dict[str, Any] = {}  # model_name -> its ManagedServer
        self.body_bytes = Gate(config.general_settings.max_inflight_body_bytes)
        self.started = False
        self.failure: str | None = None  # why a managed server did not come up
        self._starting: asyncio.Task[None] | None = None
        self._warming: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self.started and not self.problems()

    @property
    def warming(self) -> bool:
        """True until the compression pool and this process's tokenizers are warm (issue 59)."""
        return not self.started or (self._warming is not None and not self._warming.done())

    def problems(self) -> list[str]:
        """What keeps the gateway from serving every model, one line per component; [] when ready."""
        found = [f"model {name!r}: {server.problem}"
                 for name, server in self.managed.items() if not server.ready]
        if self.chat is not None:
            workers = self.chat.compressor.workers
            found += workers.problems()
            if self.warming and not found:  # a worker is up: requests are served, not yet at full speed
                found.append(f"compression pool: warming up, {workers.live()} of {workers.size} ready")
        return found

    @asynccontextmanager
    async def lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        general = self.config.general_settings
        try:
            self.stats = _open_stats(general)  # first: a path it cannot open stops start-up before any work
        except Exception:
            if self._early is not None:  # the CLI's pool, still warming: the failed start must not wait
                self._early.close()
            if self._early_managed is not None:  # and its model servers, launched early
                await self._early_managed.stop()
            raise
        workers, self._early = self._early or pool_for(self.config), None  # a pool per lifespan
        workers.metrics = self.metrics
        compressor = Compressor(workers, route_cache_size=general.route_cache_size,
                                max_queued=general.queued_compressions, metrics=self.metrics)
        self.chat = ChatService(self.config, compressor, self.metrics)
        self.metrics.stats = self.stats.recorder.add
        self.metrics.workers_live.set_function(workers.live)  # read at each scrape
        auto = needs_router(self.config)
        early, self._early_managed = self._early_managed, None
        self.managed = early.servers if early else self._managed_servers()
        for name, server in self.managed.items():
            server.on_restart = self.metrics.managed_restarts.labels(name).inc
        self.chat.managed = self.managed
        # The pool, and models, warm in the background (workers import MixPR for seconds): liveliness
        # answers at once, readiness once they are warm, and a request that comes sooner waits for the
        # first warm worker (issue 59).
        self._warming = asyncio.create_task(self._warm(app, compressor, with_router=auto))
        self._starting = asyncio.create_task(self._start_managed(early.started if early else None))
        freeze_startup_objects()
        self.started = True
        try:
            yield
        finally:
            self.started = False
            for task in (self._warming, self._starting):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._stop_managed()
            await self.chat.aclose()
            compressor.close()
            self.metrics.stats = None
            await asyncio.to_thread(self.stats.close)  # what is queued is written before exit

    def _managed_servers(self) -> dict[str, Any]:
        """One ``ManagedServer`` per model with a ``managed_server`` block; bad settings fail start-up."""
        if not any(m.managed_server for m in self.config.model_list):
            return {}
        return _managed_module().servers_for(self.config.model_list)

    @property
    def starting(self) -> bool:
        """True until every managed server has been started once (or one failed to)."""
        return not self.started or (self._starting is not None and not self._starting.done())

    async def _warm(self, app: FastAPI, compressor: Compressor, *, with_router: bool) -> None:
        # What LiteLLM's first call imports, before readiness rather than on the first request: in a
        # thread, beside the pool's warm-up (its fork server's imports take longer).
        first_call = asyncio.ensure_future(asyncio.to_thread(warm.first_call))
        try:
            await compressor.start(with_router=with_router, routers=router_models(self.config))
        except Exception as exc:  # readiness says so; the process stays up to answer liveliness
            self.failure = f"compression: {type(exc).__name__}: {exc}"
            log.error("warming the compression pool failed: %s", exc)
            return
        finally:
            await first_call
        # The gateway forwards with acompletion, whose client and logging are others: on this loop.
        await warm.first_async_call([entry.upstream_model for entry in self.config.model_list])
        try:
            await asyncio.to_thread(_read_endpoints, app.routes)
        except Exception as exc:  # FastAPI's internals moved: its first requests pay, as before
            log.info("could not read the endpoints ahead of their first request: %s", exc)
        # The tokenizers' tables loaded since the start's freeze: frozen too, as when the warm-up came
        # first. Only what is not yet frozen is walked, so this collection is short.
        freeze_startup_objects()

    async def _start_managed(self, started: concurrent.futures.Future[str | None] | None) -> None:
        """Start the managed servers, or wait for the start the CLI began early (``started``)."""
        if not self.managed:
            return
        starting = asyncio.wrap_future(started) if started else _managed_module().start_all(self.managed)
        failure = await starting
        if failure is not None:
            self.failure = failure

    async def _stop_managed(self) -> None:
        for server in reversed(list(self.managed.values())):
            try:
                await server.stop()
            except Exception:  # keep stopping the others; the error is logged, not fatal at shutdown
                log.exception("stopping a managed server failed")


def _managed_module() -> ModuleType:
    """``gateway.local.managed``, imported when a model has a ``managed_server`` block."""
    try:
        from gateway.local import managed
    except ImportError as exc:
        raise RuntimeError(f"a model has a managed_server, but gateway.local.managed cannot be imported "
                           f"({exc})") from exc
    return managed


def _open_stats(general: GeneralSettings) -> Stats:
    """The operator's page's store (``gateway.stats``), or a ConfigError naming the setting."""
    try:
        return open_stats(redis_url=general.form_cache_url, path=general.stats_path,
                          retention_days=general.stats_retention_days, ring=general.stats_recent)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"general_settings.stats_path {general.stats_path!r}: cannot open the stats "
                          f"store there ({exc}); give a writable file path, or remove it to keep the "
                          f"figures in memory") from exc


def freeze_startup_objects() -> None:
    """Keep the garbage collector off what start-up built (issue 23). LiteLLM and its model map
    leave ~430k tracked objects; every full collection walks them all (0.3-0.5 s, the loop stopped),
    which showed as p99 spikes of that size under load. Frozen, they are never walked again; what
    requests allocate is collected as before."""
    gc.collect()
    gc.freeze()


def _warn_unhonoured(config: GatewayConfig) -> None:
    """A ``responses_api: true`` the relay cannot honour is said at start-up, with why (it was ignored
    without a word, and /v1/responses went through LiteLLM's translation)."""
    timeout = config.general_settings.request_timeout_s
    for entry in config.model_list:
        why = responses_relay.not_honoured(entry, timeout=timeout)
        if why:
            log.warning("model %s declares responses_api: true, but /v1/responses goes through LiteLLM's "
                        "translation: %s", entry.model_name, why)


def _read_endpoints(routes: list[Any]) -> None:
    """What FastAPI works out for each endpoint on its first request, worked out now, in a thread: each
    router's effective routes, and each endpoint's source file, read and tokenized to find its line for
    error texts (7 ms for the gateway's 27 endpoints, blocking the loop a fraction at a time). Both are
    FastAPI's own caches, behind private names: a FastAPI without them is left as it is."""
    extract = getattr(fastapi.routing, "_extract_endpoint_context", None)
    for route in routes:
        if isinstance(route, fastapi.routing.APIRoute) and extract is not None:
            extract(route.dependant.call)
        elif callable(getattr(route, "effective_candidates", None)):  # an included router
            route.effective_candidates()
            _read_endpoints(getattr(route.original_router, "routes", []))


def create_app(config: GatewayConfig, *, host: str = "127.0.0.1", workers: Workers | None = None,
               managed: EarlyServers | None = None) -> FastAPI:
    """The gateway for ``config``, to be served on ``host``; start it with any ASGI server
    (``mixpr-gateway`` uses uvicorn). Refuses a non-loopback ``host`` without a master key.
    ``workers``: its compression pool, when already made (and maybe started) for ``config``;
    ``managed``: its model servers, when already launched for ``config`` (``gateway.starting``)."""
    exposure.check_bind(config, host)
    patches.install()  # the gateway's own LiteLLM settings; the plug-in never installs them
    redaction.install(config)  # the operator's keys, hosts, model names and files, out of error texts
    _warn_unhonoured(config)
    state = GatewayState(config, host, workers, managed)
    # FastAPI's own OpenTelemetry bridge looks its providers up on every request (and would record
    # exception messages, which can quote prompts); the gateway reports through /metrics.
    app = FastAPI(title="MixPR Gateway", lifespan=state.lifespan, docs_url=None, redoc_url=None,
                  telemetry=NO_TELEMETRY)
    app.state.gateway = state
    app.include_router(openai_chat.router)
    app.include_router(passthrough.router)
    app.include_router(responses_compact.router)  # before /v1/responses: its own path
    app.include_router(openai_responses.router)
    app.include_router(anthropic_messages.router)
    app.include_router(guardrail_api.router)
    app.include_router(compress_api.router)
    app.include_router(ui_routes.router)
    app.include_router(router)
    _register_error_handlers(app)
    # The last added runs first: metrics see every response, the 500s of unexpected errors included.
    if state.loopback_only:  # DNS rebinding: only loopback Host names (gateway.edge.exposure)
        app.add_middleware(exposure.HostCheck, allowed=config.general_settings.allowed_hosts,
                           respond=refused)
    app.add_middleware(BodyBytesMiddleware, gate=state.body_bytes,
                       on_shed=state.metrics.shed.labels("body_bytes").inc)
    app.add_middleware(UnexpectedErrors, counter=state.metrics.unexpected_errors, respond=internal_error)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    app.add_middleware(AfterResponse)  # outermost: deferred work starts once the response is sent
    return app


def app_from_env() -> FastAPI:
    """The app for the config file named by ``MIXPR_CONFIG``, served on ``MIXPR_HOST`` (how uvicorn
    workers build it)."""
    import os

    from gateway.config import load_config

    return create_app(load_config(os.environ.get("MIXPR_CONFIG", "config.yaml")),
                      host=os.environ.get("MIXPR_HOST", "127.0.0.1"))


@router.get("/v1/models")
@router.get("/models", include_in_schema=False)
async def list_models(request: Request) -> dict[str, Any]:
    authorize(request)
    names = [m.model_name for m in state(request).config.model_list]
    return {"object": "list",
            "data": [{"id": n, "object": "model", "created": 0, "owned_by": "mixpr-gateway"} for n in names]}


@router.get("/v1/models/{model:path}")
@router.get("/models/{model:path}", include_in_schema=False)
async def retrieve_model(request: Request, model: str) -> dict[str, Any]:
    authorize(request)
    entry = state(request).config.model(model)
    if entry is None:
        raise ModelNotFound(f"The model `{model}` does not exist on this gateway.", param="model")
    return {"id": entry.model_name, "object": "model", "created": 0, "owned_by": "mixpr-gateway"}


@router.get("/health/liveliness")
async def liveliness() -> dict[str, str]:
    return {"status": "alive"}


@router.get("/health/readiness")
async def readiness(request: Request) -> JSONResponse:
    gateway = state(request)
    problems = gateway.problems()
    if gateway.started and not problems:
        return JSONResponse({"status": "ready"})
    if gateway.failure:
        body = {"status": "failed", "error": gateway.failure, "problems": problems}
    elif gateway.starting or gateway.warming:
        body = {"status": "starting", "problems": problems}
    else:
        body = {"status": "unavailable", "problems": problems}
    return JSONResponse(body, status_code=503)


@router.get("/metrics")
async def metrics(request: Request) -> PlainTextResponse:
    body = state(request).metrics.exposition()
    return PlainTextResponse(body, media_type="text/plain; version=0.0.4; charset=utf-8")


def _register_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return _error(request, exc.status_code, exc.to_json(), exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        error_type = "invalid_request_error" if exc.status_code < 500 else "api_error"
        return _error(request, exc.status_code, error_json(str(exc.detail), error_type),
                      getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(request, 400, error_json("Invalid request.", "invalid_request_error"))

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        # The client hung up before sending its whole body: nobody reads this answer, and it is
        # not the gateway's fault, so nginx's 499 (client closed request) rather than a 500.
        log.info("client disconnected before sending its whole body on %s", request.url.path)
        body = error_json("Client closed the request.", "invalid_request_error")
        return _error(request, CLIENT_CLOSED, body)


def refused(path: str, exc: GatewayError) -> JSONResponse:
    """A request refused by middleware, in the shape of the API that was called."""
    return _error_at(path, exc.status_code, exc.to_json(), exc.headers)


def internal_error(path: str) -> JSONResponse:
    """The answer to a bug (``gateway.edge.unexpected``): no detail of what went wrong reaches the client."""
    body = error_json("The gateway hit an internal error.", "api_error", code="internal_error")
    return _error_at(path, 500, body)


def _error(request: Request, status: int, body: dict[str, Any], headers: Any = None) -> JSONResponse:
    return _error_at(request.url.path, status, body, headers)


def _error_at(path: str, status: int, body: dict[str, Any], headers: Any = None) -> JSONResponse:
    """The error in the shape of the API that was called: Anthropic's on its paths, else OpenAI's."""
    if path in anthropic_messages.PATHS:
        body = anthropic_messages.error_json(body["error"]["message"], status)
    return JSONResponse(body, status_code=status, headers=headers)
