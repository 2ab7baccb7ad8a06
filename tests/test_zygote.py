"""The test run's zygote (``tests/zygote.py``) forks gateways that behave as ``python -m gateway``
does: in the folder, environment and log they were given, on the arguments, and their exit codes and
signals reach the test as a ``subprocess.Popen``'s would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.ports import free_port
from tests.zygote import ENV, ROOT, Forked, end, launch, litellm_process

CONFIG = {"model_list": [{"model_name": "m", "litellm_params": {
    "model": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:9/v1", "api_key": "sk-test"}}],
    "mixpr_settings": {"router": "heuristic"}, "general_settings": {"compression_executor": "thread"}}


@pytest.fixture(scope="module")
def socket_path() -> Iterator[str]:
    """The run's zygote (``-p tests.zygote``), else one of this module's own."""
    if os.environ.get(ENV):
        yield os.environ[ENV]
        return
    server, path = launch()
    yield path
    end(server, path)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


def _ready(port: int, process: Forked) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, "the forked gateway exited"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/readiness").status_code == 200:
                return
        except httpx.ConnectError:
            pass
        time.sleep(0.1)
    raise AssertionError("the forked gateway never got ready")


def test_a_forked_gateway_serves_from_its_folder_logs_where_told_and_stops_on_sigterm(
        socket_path: str, tmp_path: Path) -> None:
    (tmp_path / "relative.yaml").write_text(yaml.safe_dump(CONFIG))
    port, log = free_port(), tmp_path / "gateway.log"
    os.chdir(tmp_path)  # the config's relative path resolves in the folder the start was asked from
    try:
        argv = ["--config", "relative.yaml", "--port", str(port), "--log-level", "info"]
        process = Forked(socket_path, argv, _env(), log)
    finally:
        os.chdir(Path(__file__).resolve().parents[1])
    assert process.pid not in (os.getpid(), None)
    _ready(port, process)
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()["data"][0]["id"] == "m"
    process.send_signal(signal.SIGTERM)
    # As from `python -m gateway`: uvicorn shuts down, then raises the signal again (exit 143 in a shell).
    assert process.wait(30) == -signal.SIGTERM and process.returncode == -signal.SIGTERM
    logged = log.read_text()  # uvicorn's own lines, on the child's stderr
    assert f"127.0.0.1:{port}" in logged and "Application shutdown complete" in logged


def test_a_bad_config_exits_2_with_the_gateways_message(socket_path: str, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("model_list: 3\n")
    log = tmp_path / "gateway.log"
    argv = ["--config", str(tmp_path / "bad.yaml"), "--port", str(free_port())]
    process = Forked(socket_path, argv, _env(), log)
    assert process.wait(60) == 2
    assert log.read_text().startswith("mixpr-gateway: ")


def test_sigkill_is_the_exit_code_and_the_environment_is_the_starts(socket_path: str, tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**CONFIG, "general_settings": {
        **CONFIG["general_settings"], "master_key": "os.environ/ZYGOTE_TEST_KEY"}}))
    port = free_port()
    process = Forked(socket_path, ["--config", str(tmp_path / "config.yaml"), "--port", str(port)],
                     _env(ZYGOTE_TEST_KEY="sk-from-the-start"), None)
    _ready(port, process)
    url = f"http://127.0.0.1:{port}/v1/models"
    key = {"Authorization": "Bearer sk-from-the-start"}
    assert httpx.get(url, headers=key, timeout=10).status_code == 200
    assert httpx.get(url, headers={"Authorization": "Bearer sk-other"}, timeout=10).status_code == 401
    process.kill()
    assert process.wait(30) == -signal.SIGKILL


def test_the_litellm_zygote_holds_the_proxy_and_nothing_of_the_gateway(tmp_path: Path) -> None:
    """What the plug-in's host checks rest on (``tests/gateway/plugins/test_plugin_host.py``): a start
    that has loaded LiteLLM's proxy has not loaded the gateway, whose plug-in it must import itself; its
    stdout and exit code reach the test. The run's zygote when there is one, else a fresh interpreter."""
    code = ("import sys, litellm.proxy.proxy_server\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('gateway', 'mixpr')], sys.argv[1:])\n"
            "sys.exit(3)")
    out = tmp_path / "stdout"
    process = litellm_process(["--flag"], _env(), tmp_path / "stderr", code=code, cwd=tmp_path, stdout=out)
    assert process.wait(300) == 3, (tmp_path / "stderr").read_text()
    assert out.read_text() == "[] ['--flag']\n"


def _children(pid: int) -> set[int]:
    """As ``tests/gateway/run/test_workers_close.py`` reads them."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(child) for child in (task / "children").read_text().split()}
    return found


def _in(folder: Path, pids: set[int]) -> set[int]:
    return {pid for pid in pids if _cwd(pid) == folder}


def _cwd(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def test_a_forked_gateways_fork_server_comes_from_the_zygote_and_goes_with_the_gateway(
        socket_path: str, tmp_path: Path) -> None:
    """The compression pool's fork server of a forked gateway is forked by the zygote, which has loaded
    what the server preloads (``tests/zygote_forkserver.py``), in the gateway's folder; its workers are
    the gateway's (the readiness waits for their warm-up, held by the file the gateway's environment
    names), and the server and workers go when the gateway is killed, as a spawned server's do."""
    from gateway.compress.compressor import START_SUFFIX, TEST_HOLD_ENV

    config = {**CONFIG, "general_settings": {"compression_executor": "process", "compression_workers": 1}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    hold = tmp_path / "hold"
    Path(str(hold) + START_SUFFIX).touch()
    port = free_port()
    os.chdir(tmp_path)
    try:
        process = Forked(socket_path, ["--config", "config.yaml", "--port", str(port)],
                         _env(**{TEST_HOLD_ENV: str(hold)}), tmp_path / "gateway.log")
    finally:
        os.chdir(Path(__file__).resolve().parents[1])
    zygote = int(Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    deadline = time.monotonic() + 60
    while not (server := _in(tmp_path, _children(zygote)) - {process.pid}) and time.monotonic() < deadline:
        time.sleep(0.1)
    [server_pid] = server  # the zygote's child, in the gateway's folder: not the gateway's own
    assert not [pid for pid in _children(process.pid) if b"forkserver" in _cmdline(pid)]
    time.sleep(2)  # the worker's warm-up waits for the hold file the gateway's environment names
    assert httpx.get(f"http://127.0.0.1:{port}/health/readiness", timeout=10).status_code == 503
    workers = _children(server_pid)
    assert workers and _in(tmp_path, workers) == workers
    Path(str(hold) + START_SUFFIX).unlink()
    _ready(port, process)
    process.kill()
    assert process.wait(30) == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() and b"Z" not in _state(pid) for pid in {server_pid, *workers}):
        assert time.monotonic() < deadline, "the fork server or a worker outlived its gateway"
        time.sleep(0.1)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _state(pid: int) -> bytes:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return b"Z"
    return stat[stat.rfind(b")") + 2:].split()[0]


WORKER_TESTS = '''
import os, sys
from pathlib import Path

def _parent(pid):
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[1])

def test_where_it_runs():
    parent = Path(f"/proc/{_parent(os.getpid())}/cmdline").read_bytes()
    seen = ["litellm" in sys.modules, b"from tests.zygote import serve" in parent, os.getcwd(),
            os.environ["ZYGOTE_WORKER_TEST"]]
    Path(__file__).with_name("seen").write_text(repr(seen))

def test_a_failing_assert_is_explained():
    numbers = [1, 2]
    assert sum(numbers) == 4
'''


def test_pytest_workers_come_from_the_zygote_with_the_gateway_loaded(tmp_path: Path) -> None:
    """``-n`` with ``-p tests.zygote``: each pytest-xdist worker is a child of a gateway zygote, with
    the gateway (LiteLLM) already imported, in the run's folder and environment; a failing assert is
    explained as pytest rewrites it; the run's exit code and output are xdist's own."""
    (tmp_path / "test_workers.py").write_text(WORKER_TESTS)
    env = _env(ZYGOTE_WORKER_TEST="from-the-run")  # with this run's zygotes, the nested run uses them
    command = [sys.executable, "-m", "pytest", "-p", "tests.zygote", "-n", "2", "-p", "no:cacheprovider",
               "-q", "--rootdir", str(tmp_path), str(tmp_path / "test_workers.py")]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "assert 3 == 4" in done.stdout and "where 3 = sum([1, 2])" in done.stdout
    assert (tmp_path / "seen").read_text() == repr([True, True, str(ROOT), "from-the-run"])
