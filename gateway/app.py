"""The FastAPI app: routes, auth, body limits, lifespan and the one place errors become responses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, PlainTextResponse, Response

from gateway.chat import ChatService
from gateway.compression import Compressor
from gateway.config import GatewayConfig
from gateway.errors import BadRequest, GatewayError, PayloadTooLarge, Unauthorized, error_json
from gateway.metrics import Metrics, MetricsMiddleware

log = logging.getLogger("gateway.app")

router = APIRouter()


class GatewayState:
    """Everything a request needs, built once per app; services start in the lifespan."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.chat: ChatService | None = None
        self.managed: list[Any] = []
        self.started = False
        self.failure: str | None = None  # why a managed server did not come up
        self._starting: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self.started and all(server.ready for server in self.managed)

    @asynccontextmanager
    async def lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        general = self.config.general_settings
        compressor = Compressor(workers=general.compression_workers,
                                route_cache_size=general.route_cache_size,
                                executor=general.compression_executor)
        self.chat = ChatService(self.config, compressor, self.metrics)
        defaults = self.config.mixpr_settings
        auto = any(m.settings(defaults).router == "auto" for m in self.config.model_list)
        await compressor.start(with_router=auto)
        self.managed = self._managed_servers()
        # Models load in the background: liveliness answers at once, readiness once they answer.
        self._starting = asyncio.create_task(self._start_managed())
        self.started = True
        try:
            yield
        finally:
            self.started = False
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._starting
            await self._stop_managed()
            compressor.close()

    def _managed_servers(self) -> list[Any]:
        """One ``ManagedServer`` per model with a ``managed_server`` block; bad settings fail start-up."""
        entries = [m for m in self.config.model_list if m.managed_server]
        if not entries:
            return []
        try:
            from gateway.local_model import ManagedServer
        except ImportError as exc:
            raise RuntimeError(
                f"model {entries[0].model_name!r} has a managed_server, but gateway.local_model "
                f"cannot be imported ({exc})"
            ) from exc
        return [ManagedServer(entry.managed_server) for entry in entries]

    async def _start_managed(self) -> None:
        for server in self.managed:
            try:
                await server.start()
            except Exception as exc:
                self.failure = f"{type(exc).__name__}: {exc}"
                log.error("managed model server failed to start: %s", exc)
                return

    async def _stop_managed(self) -> None:
        for server in reversed(self.managed):
            try:
                await server.stop()
            except Exception:  # keep stopping the others; the error is logged, not fatal at shutdown
                log.exception("stopping a managed server failed")


def create_app(config: GatewayConfig) -> FastAPI:
    """The gateway for ``config``; start it with any ASGI server (``mixpr-gateway`` uses uvicorn)."""
    state = GatewayState(config)
    app = FastAPI(title="MixPR Gateway", lifespan=state.lifespan, docs_url=None, redoc_url=None)
    app.state.gateway = state
    app.include_router(router)
    _register_error_handlers(app)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    return app


def app_from_env() -> FastAPI:
    """The app for the config file named by ``MIXPR_CONFIG`` (how uvicorn workers build it)."""
    import os

    from gateway.config import load_config

    return create_app(load_config(os.environ.get("MIXPR_CONFIG", "config.yaml")))


def _state(request: Request) -> GatewayState:
    return request.app.state.gateway


def authorize(request: Request) -> None:
    """Bearer (or ``api-key``) must equal ``master_key`` when one is configured."""
    key = _state(request).config.general_settings.master_key
    if not key:
        return
    header = request.headers.get("authorization", "")
    given = header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("api-key", "")
    if not given:
        raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
    if not secrets.compare_digest(given.encode(), key.encode()):
        raise Unauthorized("Incorrect API key provided.")


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON, refusing bodies over ``limit`` bytes before reading them whole."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("We could not parse the JSON body of your request.") from None


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than this gateway's limit of {limit} bytes "
                           f"(general_settings.max_body_bytes).")


@router.post("/v1/chat/completions")
@router.post("/chat/completions", include_in_schema=False)
async def chat_completions(request: Request) -> Response:
    state = _state(request)
    authorize(request)
    body = await read_json(request, state.config.general_settings.max_body_bytes)
    assert state.chat is not None  # set by the lifespan before any request is served
    return await state.chat.handle(body, request.headers)


@router.get("/v1/models")
@router.get("/models", include_in_schema=False)
async def list_models(request: Request) -> dict[str, Any]:
    authorize(request)
    names = [m.model_name for m in _state(request).config.model_list]
    return {"object": "list",
            "data": [{"id": n, "object": "model", "created": 0, "owned_by": "mixpr-gateway"} for n in names]}


@router.get("/health/liveliness")
async def liveliness() -> dict[str, str]:
    return {"status": "alive"}


@router.get("/health/readiness")
async def readiness(request: Request) -> JSONResponse:
    state = _state(request)
    if state.ready:
        return JSONResponse({"status": "ready"})
    if state.failure:
        return JSONResponse({"status": "failed", "error": state.failure}, status_code=503)
    return JSONResponse({"status": "starting"}, status_code=503)


@router.get("/metrics")
async def metrics(request: Request) -> PlainTextResponse:
    body = _state(request).metrics.exposition()
    return PlainTextResponse(body, media_type="text/plain; version=0.0.4; charset=utf-8")


def _register_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return JSONResponse(exc.to_json(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        error_type = "invalid_request_error" if exc.status_code < 500 else "api_error"
        return JSONResponse(error_json(str(exc.detail), error_type), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_json("Invalid request.", "invalid_request_error"), status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Messages can quote the request; tracebacks only at debug level, so no prompt text by default.
        log.error("unexpected error (%s) on %s", type(exc).__name__, request.url.path)
        log.debug("traceback", exc_info=exc)
        return JSONResponse(error_json("The gateway hit an internal error.", "api_error"), status_code=500)
