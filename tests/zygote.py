"""Gateway processes forked from one process that has already imported the gateway: a zygote, for
the tests whose gateway needs a process of its own (a restart, replicas, a cold process) but which
are not about how a process starts (``tests/gateway/test_startup.py`` still starts fresh ones).

Each ``python -m gateway`` spent about 3.5 of its 5 to 7 CPU-seconds importing LiteLLM, the openai
SDK and FastAPI before it could answer (issue 59), and ``make test`` started a dozen of them on two
cores. Loaded with ``-p tests.zygote`` (``make test``), this plugin starts one zygote per test run,
in the controller, beside the workers' collection: it imports ``gateway.app`` once, then forks one
child per start. A child is a real process (its own pid, sockets, signals and exit code); it swaps
in the environment, folder and log the test gave and runs ``gateway.__main__.main``, as
``python -m gateway`` would after its imports. ``tests/gateway/processes.py`` asks the zygote when
``$MIXPR_TEST_ZYGOTE`` names its socket, and starts a fresh interpreter otherwise (benches, a run
without the plugin).

A second zygote does the same for LiteLLM's proxy (``litellm --config ...``, and the scripts that
need what a proxy has loaded): importing ``litellm.proxy.proxy_server`` costs 12 CPU-seconds, and the
plug-in's tests start three such processes. It imports at its first start, so a run that starts
none pays nothing; it never imports the gateway, whose plug-in the proxy loads itself.

A gateway's compression pool has a fork server of its own, a new interpreter that imported MixPR,
scikit-learn and the tokenizers' tables (``gateway.compress.preload``): about 1.5 CPU-seconds for each
gateway a test starts. The gateway's zygote loads them too, and a gateway forked from it asks it for
its fork server as well (``tests/zygote_forkserver.py``): the same process, its own socket,
environment, folder and log, forked with all of that loaded.

pytest-xdist's workers come from the gateway's zygote too (``tests/zygote_worker.py``): each new
interpreter imported the gateway to collect the tests, 8 CPU-seconds, three at once; on a fresh clone
they wait for the zygote, which compiles what they then read.

A zygote is single-threaded when it forks (checked), and talks over a Unix socket, one JSON line
each way per request (with file descriptors for some): ``start`` (it forks, answers the pid),
``forkserver`` (a gateway's pool's fork server, on its socket, pipe, stdout and stderr), ``worker``
(a pytest worker, on its stdin, stdout and stderr) and ``poll`` (the exit code, or null).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ENV = "MIXPR_TEST_ZYGOTE"  # the socket of this run's gateway zygote
LITELLM_ENV = "MIXPR_TEST_LITELLM_ZYGOTE"  # the socket of its LiteLLM-proxy zygote
# What each zygote imports once, and whether before its first start (the gateway's: most runs start
# some) or at it (the proxy's).
# The gateway's also loads what a gateway's pool's fork server preloads (``gateway.compress.preload``),
# so that a fork server forked from it has that, and a gateway or a pytest worker the tokenizers' tables.
PRELOADS = {ENV: (("gateway.__main__", "gateway.app", "gateway.compress.preload"), False),
            LITELLM_ENV: (("litellm.proxy.proxy_cli", "litellm.proxy.proxy_server"), True)}
# ``litellm <argv>``, as the console script runs it, from a process that has imported LiteLLM's proxy.
RUN_PROXY = "import sys\nfrom litellm import run_server\nsys.exit(run_server())"
ROOT = Path(__file__).resolve().parents[1]
CONNECT_TIMEOUT_S = 180  # its import: seconds when idle, a minute beside three collecting workers
_STARTED: list[tuple[subprocess.Popen[bytes], str, str]] = []


def pytest_configure(config: Any) -> None:
    """In the controller (or a run without xdist) only: the workers inherit the sockets' paths, and are
    forked from the gateway's zygote (``tests/zygote_worker.py``)."""
    if hasattr(config, "workerinput"):
        return
    for kind in PRELOADS:
        if not os.environ.get(kind):
            server, path = launch(kind)
            _STARTED.append((server, path, kind))
            os.environ[kind] = path
    _workers_from(config)


def _workers_from(config: Any) -> None:
    """xdist's workers of ``-n`` (plain ``popen`` specs), forked from the gateway zygote (this run's, or
    the one of the run that started this one); they wait for it to have imported, where on a fresh
    clone each compiled LiteLLM beside it."""
    tx = getattr(config.option, "tx", None) or []
    if tx and all(spec == "popen" for spec in tx):
        python = shlex.join([sys.executable, str(ROOT / "tests" / "zygote_worker.py")])
        config.option.tx = [f"popen//python={python}" for _ in tx]


def pytest_unconfigure(config: Any) -> None:
    for server, path, kind in _STARTED:
        end(server, path)
        os.environ.pop(kind, None)
    _STARTED.clear()


def launch(kind: str = ENV) -> tuple[subprocess.Popen[bytes], str]:
    """A zygote of ``kind`` (``ENV``: the gateway's, ``LITELLM_ENV``: the proxy's), and the socket it
    will listen on (the gateway's once it has imported the gateway)."""
    path = os.path.join(tempfile.mkdtemp(prefix="mixpr-zygote-"), "socket")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if kind == LITELLM_ENV:  # as the proxy tests start theirs (tests/gateway/plugins/proxy_processes.py)
        env["LITELLM_TELEMETRY"] = "False"
        env.pop("DATABASE_URL", None)
    code = f"from tests.zygote import serve; serve({path!r}, {kind!r})"
    server = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    return server, path


def end(server: subprocess.Popen[bytes], path: str) -> None:
    server.terminate()
    server.wait(30)
    Path(path).unlink(missing_ok=True)
    Path(path).parent.rmdir()


def litellm_process(argv: list[str], env: dict[str, str], log: Path | None, *, code: str | None = None,
                    cwd: Path | None = None, stdout: Path | None = None) -> subprocess.Popen[bytes] | Forked:
    """``litellm <argv>`` (LiteLLM's proxy), or ``python -c <code> <argv>``, as a process that has
    imported LiteLLM's proxy: forked from the run's LiteLLM zygote when there is one, else a new
    interpreter. Its stderr is appended to ``log``, its stdout to ``stdout`` (None: discarded)."""
    code = code or RUN_PROXY
    return _start(LITELLM_ENV, ["-c", code], code, argv, env, log, cwd, stdout)


def gateway_process(argv: list[str], env: dict[str, str], log: Path | None, *, code: str | None = None,
                    cwd: Path | None = None, fresh: bool = False) -> subprocess.Popen[bytes] | Forked:
    """``python -m gateway <argv>``, or ``python -c <code> <argv>`` (a launcher that patches the gateway,
    then calls its ``main``), as a process whose stderr is appended to ``log`` (None: discarded), in
    ``cwd`` (default: the caller's): forked from the run's zygote when there is one, unless ``fresh`` (a
    test about the start itself), else a new interpreter."""
    launcher = ["-c", code] if code is not None else ["-m", "gateway"]
    return _start(None if fresh else ENV, launcher, code, argv, env, log, cwd)


def _start(zygote: str | None, launcher: list[str], code: str | None, argv: list[str],
           env: dict[str, str], log: Path | None, cwd: Path | None,
           stdout: Path | None = None) -> subprocess.Popen[bytes] | Forked:
    """Forked from the zygote whose socket ``$<zygote>`` names, when set; else ``python <launcher>
    <argv>``."""
    path = os.environ.get(zygote) if zygote else None
    if path:
        return Forked(path, argv, env, log, code=code, cwd=cwd, stdout=stdout)
    return _popen([sys.executable, *launcher, *argv], env, log, cwd, stdout)


def _popen(args: list[str], env: dict[str, str], log: Path | None, cwd: Path | None,
           stdout: Path | None = None) -> subprocess.Popen[bytes]:
    with contextlib.ExitStack() as files:
        err = files.enter_context(log.open("ab")) if log is not None else subprocess.DEVNULL
        out = files.enter_context(stdout.open("ab")) if stdout is not None else subprocess.DEVNULL
        return subprocess.Popen(args, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)


class Forked:
    """A gateway the zygote forked, behind ``subprocess.Popen``'s face: ``pid``, ``returncode``,
    ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``. Signals go to it directly; its exit
    code comes from the zygote, its parent."""

    def __init__(self, socket_path: str, argv: list[str], env: dict[str, str], log: Path | None, *,
                 code: str | None = None, cwd: Path | None = None, stdout: Path | None = None) -> None:
        self._socket = socket_path
        request: dict[str, Any] = {"op": "start", "argv": argv, "env": env, "cwd": str(cwd or os.getcwd()),
                                   "log": str(log) if log is not None else None, "code": code,
                                   "stdout": str(stdout) if stdout is not None else None}
        self.pid: int = ask(socket_path, request)["pid"]
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = ask(self._socket, {"op": "poll", "pid": self.pid})["returncode"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"gateway {self.pid}", timeout or 0)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def ask(path: str, request: dict[str, Any], fds: list[int] | None = None) -> dict[str, Any]:
    """The zygote's answer to one request, ``fds`` sent along; waits for its socket while it imports."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(CONNECT_TIMEOUT_S)  # the proxy's zygote imports at its first start
                conn.connect(path)
                socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], fds or [])
                with conn.makefile("rb") as answer:
                    line = answer.readline()
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no test zygote on {path} after {CONNECT_TIMEOUT_S} s") from None
            time.sleep(0.1)
    reply: dict[str, Any] = json.loads(line)
    if "error" in reply:
        raise RuntimeError(f"the test zygote: {reply['error']}")
    return reply


def serve(path: str, kind: str = ENV) -> None:
    """The zygote: import once (``PRELOADS``), then fork a process per ``start``; exits with the run
    (its parent)."""
    modules, deferred = PRELOADS[kind]
    if not deferred:
        _load(modules)
    parent = os.getppid()
    ended: dict[int, int] = {}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path + ".new")
        os.rename(path + ".new", path)  # clients connect only once it listens
        listener.listen(64)
        listener.settimeout(5)
        while os.getppid() == parent:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                request, fds = _receive(conn)
                held = (listener, conn)
                if request["op"] == "start":
                    _load(modules)  # what every start imports, paid here once
                    start = {**request, "zygote": path if kind == ENV else None}
                    reply = _fork(functools.partial(_become, start), held)
                elif request["op"] == "worker":
                    reply = _fork(functools.partial(_serve_worker, request, fds), held, fds)
                elif request["op"] == "forkserver":
                    reply = _fork(functools.partial(_serve_pool, request, fds), held, fds)
                else:
                    reply = _poll(request["pid"], ended)
                conn.sendall(json.dumps(reply).encode() + b"\n")


def _load(modules: tuple[str, ...]) -> None:
    for name in modules:
        importlib.import_module(name)


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request's JSON line, and the file descriptors sent with it (``ask``'s ``fds``)."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 8)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 16)
        if not more:
            break
        data += more
    return json.loads(data), fds


def _fork(child: Callable[[], None], held: tuple[socket.socket, ...],
          fds: Sequence[int] = ()) -> dict[str, Any]:
    """Fork a process that closes the zygote's ``held`` sockets and runs ``child`` (which never returns);
    the parent's copies of ``fds``, received for the child, are closed."""
    if threading.active_count() != 1:  # a thread's locks would stay locked in the child
        return {"error": f"{threading.active_count()} threads in the zygote: it cannot fork safely"}
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return {"pid": pid}
    for sock in held:
        sock.close()
    child()
    raise AssertionError("unreachable")


def _serve_pool(request: dict[str, Any], fds: list[int]) -> None:
    """In the child: a gateway's pool's fork server (``tests/zygote_forkserver.py`` asks for it); ``fds``
    are its listening socket, the read end of its "alive" pipe, its stdout and stderr. It runs as
    ``multiprocessing``'s own runs, on what this process has loaded, until the gateway closes the pipe."""
    code = 1
    try:
        _adopt(request)
        listener, alive, out, err = fds
        os.dup2(out, 1)
        os.dup2(err, 2)
        from multiprocessing import forkserver

        forkserver.main(listener, alive, request["preload"])
        code = 0
    except SystemExit as stop:  # the pipe closed: the server's own way out
        code = stop.code if isinstance(stop.code, int) else 0
    except BaseException:
        traceback.print_exc()
    finally:
        # Not the zygote's exit handlers, as a spawned server has none of them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve_worker(request: dict[str, Any], fds: list[int]) -> None:
    """In the child: ``python -u -c <code>`` (a pytest-xdist worker, ``tests/zygote_worker.py`` asks),
    on ``fds``, that process's stdin, stdout and stderr, in its folder and environment."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # New stdio objects on the new descriptors, as -u makes them: stdout and stderr unbuffered.
    sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(open(1, "wb", 0, closefd=False), write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(open(2, "wb", 0, closefd=False), write_through=True,
                                                   errors="backslashreplace")
    sys.dont_write_bytecode = request["dont_write_bytecode"]
    # This checkout's test modules are pytest's to import, and rewrite: this one (-p tests.zygote) too.
    for name in [name for name in sys.modules if name.partition(".")[0] == "tests"]:
        del sys.modules[name]
    _adopt(request)
    _run_code(request)


def _become(request: dict[str, Any]) -> None:
    """In the child: the test's folder, environment and log, then the gateway's own entry point. Its
    exit (SystemExit) unwinds to the interpreter's, as ``python -m gateway``'s does: atexit runs."""
    _adopt(request)
    null = os.open(os.devnull, os.O_RDWR)
    log, out = (os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_APPEND) if request.get(name) else null
                for name in ("log", "stdout"))
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(log, 2)
    if request.get("zygote"):
        from tests.zygote_forkserver import use

        use(request["zygote"])
    if request.get("code") is not None:
        _run_code(request)
    from gateway.__main__ import main

    sys.argv = [main.__module__, *request["argv"]]
    sys.exit(main(request["argv"]))


def _adopt(request: dict[str, Any]) -> None:
    """The start's folder and environment."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # The interpreter read $PYTHONPATH when the zygote started; a start's own entries go first, as
    # they would in a fresh one.
    for entry in reversed(request["env"].get("PYTHONPATH", "").split(os.pathsep)):
        if entry:
            sys.path.insert(0, entry)


def _run_code(request: dict[str, Any]) -> None:
    """As ``python -c``: its own module, argv[0] "-c"; exit 0 at its end."""
    sys.argv = ["-c", *request["argv"]]
    exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
    sys.exit(0)


def _poll(pid: int, ended: dict[int, int]) -> dict[str, Any]:
    if pid not in ended:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return {"error": f"{pid} is not a child of the zygote"}
        if not done:
            return {"returncode": None}
        ended[pid] = os.waitstatus_to_exitcode(status)
    return {"returncode": ended[pid]}
