"""The ASGI app ``mixpr-gateway`` serves from its first second (issue 59).

Importing the gateway takes seconds (LiteLLM's modules alone take 4 s on an idle 2-core machine), and
a server that listened only after would fail every liveliness probe meanwhile and make every start,
restart after a crash and autoscaled replica wait. So uvicorn serves this small app at once: it
answers the two health paths itself, builds the gateway in a thread, runs the gateway's own lifespan,
and from then on hands every request to it. A request that comes sooner waits for the gateway: it is
served, only later.

This module imports nothing heavy; the gateway is imported by the ``build`` it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

log = logging.getLogger("gateway.starting")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LIVELINESS = "/health/liveliness"
READINESS = "/health/readiness"
LOADING = "gateway: loading (LiteLLM, the API routes)"
START_FAILED = 3  # uvicorn's own exit code for a lifespan that failed to start


class Starting:
    """Serves ``build()``'s app once built; until then answers health itself and holds other requests."""

    def __init__(self, build: Callable[[asyncio.AbstractEventLoop], ASGIApp], *,
                 stop: Callable[[], None] | None = None) -> None:
        """``build(loop)`` runs in a thread; ``loop`` is the server's, for work it starts early.
        ``stop``: how to stop the server when the gateway fails to start (default: SIGTERM to this
        process; uvicorn has no way to fail a start it has already answered)."""
        self._build = build
        self._stop = stop or _terminate
        self._app: ASGIApp | None = None
        self._inner: _Lifespan | None = None
        self._built: asyncio.Event | None = None  # made on the server's loop, in the lifespan
        self._task: asyncio.Task[None] | None = None
        self.failure: str | None = None  # why the gateway could not be built or started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if self._app is None and scope["type"] == "http" and scope["path"] in (LIVELINESS, READINESS):
            await self._health(scope["path"], send)
            return
        if self._app is None and self._built is not None:
            await self._built.wait()
        if self._app is None:  # the gateway failed to start: the server is stopping
            await _json(send, 503, {"error": {"message": "The gateway failed to start.", "type": "api_error",
                                              "code": "gateway_unavailable"}})
            return
        await self._app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup: the server listens once this is answered
        self._built = asyncio.Event()
        self._task = asyncio.create_task(self._start())
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        await self._task  # a build in its thread cannot be stopped; a signal mid-import waits for it
        if self._inner is not None:
            await self._inner.shutdown()
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self) -> None:
        try:
            app = await asyncio.to_thread(self._build, asyncio.get_running_loop())
            inner = _Lifespan(app)
            await inner.startup()
        except Exception as exc:
            self.failure = f"{type(exc).__name__}: {exc}"
            log.error("the gateway failed to start: %s", self.failure)
            self._stop()
        else:
            self._inner, self._app = inner, app
        finally:
            assert self._built is not None
            self._built.set()

    async def _health(self, path: str, send: Send) -> None:
        if path == LIVELINESS:  # the process is up and its loop answers: all liveliness asks
            await _json(send, 200, {"status": "alive"})
        elif self.failure:
            await _json(send, 503, {"status": "failed", "error": self.failure, "problems": []})
        else:
            await _json(send, 503, {"status": "starting", "problems": [LOADING]})


class _Lifespan:
    """Another app's lifespan, driven from this one's: startup, then shutdown, each awaited."""

    def __init__(self, app: ASGIApp) -> None:
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._outbox: asyncio.Queue[Message] = asyncio.Queue()
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        self._task = asyncio.create_task(app(scope, self._inbox.get, self._outbox.put))

    async def startup(self) -> None:
        await self._step("startup")

    async def shutdown(self) -> None:
        await self._step("shutdown")
        with contextlib.suppress(Exception):
            await self._task

    async def _step(self, phase: str) -> None:
        await self._inbox.put({"type": f"lifespan.{phase}"})
        answer = asyncio.ensure_future(self._outbox.get())
        await asyncio.wait({answer, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not answer.done():  # the app's lifespan ended without answering: its error says why
            answer.cancel()
            self._task.result()
            raise RuntimeError(f"the app's lifespan ended during {phase}")
        message = answer.result()
        if message["type"] != f"lifespan.{phase}.complete":
            with contextlib.suppress(Exception):
                await self._task  # the error was logged by the app; its message is in ``message``
            raise RuntimeError(message.get("message") or f"lifespan {phase} failed")


def _terminate() -> None:
    signal.raise_signal(signal.SIGTERM)


async def _json(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def build_app(config: Any, host: str, loop: asyncio.AbstractEventLoop) -> ASGIApp:
    """The gateway for ``config`` on ``host``: imported here, in the build's thread, not at start.

    Its compression pool and its managed model servers start first, on the server's loop: the
    workers' imports (MixPR, scikit-learn, the tokenizers) and the embedded model's load then run
    beside the gateway's own imports (LiteLLM) rather than after, on another core.
    """
    from gateway.compress.compressor import needs_router, pool_for, router_models, start_pool

    workers = pool_for(config)
    starting = start_pool(workers, with_router=needs_router(config), routers=router_models(config))
    asyncio.run_coroutine_threadsafe(starting, loop)
    managed = _launch_managed(config, loop)
    try:
        from gateway.app import create_app

        # Only the import, which is the cost, runs in this thread; create_app (about a millisecond)
        # runs on the server's thread, where the gateway was always built.
        made = asyncio.run_coroutine_threadsafe(
            _call(create_app, config, host=host, workers=workers, managed=managed), loop)
        return made.result()
    except BaseException:
        if managed is not None:  # no gateway will stop them: the start has failed
            asyncio.run_coroutine_threadsafe(managed.stop(), loop).result()
        raise


def _launch_managed(config: Any, loop: asyncio.AbstractEventLoop) -> Any:
    """The model servers ``config`` manages (``gateway.local.managed.EarlyServers``), launched on the
    server's loop; None when it manages none."""
    if not any(m.managed_server for m in config.model_list):
        return None
    from gateway.local.managed import EarlyServers, servers_for, start_all

    servers = servers_for(config.model_list)
    return EarlyServers(servers, asyncio.run_coroutine_threadsafe(start_all(servers), loop))


async def _call(make: Callable[..., ASGIApp], *args: Any, **kwargs: Any) -> ASGIApp:
    return make(*args, **kwargs)


def app_from_env() -> Starting:
    """What each uvicorn worker process serves (``--workers`` > 1): the gateway for the config file
    named by ``MIXPR_CONFIG``, on ``MIXPR_HOST``, as ``gateway.app.app_from_env`` builds it, behind
    ``Starting``."""
    return Starting(_app_from_env)


def _app_from_env(loop: asyncio.AbstractEventLoop) -> ASGIApp:
    from gateway.config import load_config

    config = load_config(os.environ.get("MIXPR_CONFIG", "config.yaml"))
    return build_app(config, os.environ.get("MIXPR_HOST", "127.0.0.1"), loop)
