"""A start that does only what the first request needs (issue 59), on real ``python -m gateway`` processes:
liveliness answers while the gateway loads and its pool warms, readiness says when compression is warm,
a request that comes sooner is served (only later), and the gateway's own process never imports
scikit-learn when its workers compress."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fastapi.routing
import httpx
import pytest
import yaml
from conftest import MASTER_KEY, ServerThread, closed_port, gateway_config
from fake_upstream import FakeUpstream
from pool_control import long_messages
from processes import GatewayProcess

from gateway.app import create_app
from gateway.compress.compressor import START_SUFFIX, TEST_HOLD_ENV
from gateway.config import parse_config
from mixpr import tokens

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
DEADLINE_S = 240  # a start on a busy 2-core machine has taken minutes


def _config(folder: Path, upstream: FakeUpstream) -> Path:
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(gateway_config(upstream.base_url)))
    return path


def _until(gateway: GatewayProcess, path: str, accept: Callable[[httpx.Response], bool]) -> httpx.Response:
    """The first answer on ``path`` that ``accept`` accepts, polled while the gateway runs."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        assert gateway.process.poll() is None, f"gateway exited: {gateway.logged()[-3000:]}"
        assert time.monotonic() < deadline, f"gave up waiting: {gateway.logged()[-3000:]}"
        try:
            if accept(answer := httpx.get(gateway.url + path, timeout=5)):
                return answer
        except httpx.TransportError:  # not listening yet
            pass
        time.sleep(0.05)


def _ok(answer: httpx.Response) -> bool:
    return answer.status_code == 200


def _mapped(pid: int) -> str:
    """The files process ``pid`` has mapped: every compiled extension it imported is one."""
    return Path(f"/proc/{pid}/maps").read_text()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_liveliness_answers_while_the_pool_warms_and_an_early_request_is_served(
    upstream: FakeUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own gateway process, for the test is about the start: the import of the gateway (LiteLLM),
    then a worker's warm-up, each seconds, a minute under load."""
    hold = tmp_path / "hold"
    starting = Path(str(hold) + START_SUFFIX)
    starting.touch()  # every worker's warm-up waits while this file exists
    monkeypatch.setenv(TEST_HOLD_ENV, str(hold))
    gateway = GatewayProcess(_config(tmp_path, upstream), log=tmp_path / "gateway.log", fresh=True)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        alive = _until(gateway, "/health/liveliness", _ok)
        assert alive.json() == {"status": "alive"}
        assert httpx.get(gateway.url + "/health/readiness").json()["status"] == "starting"
        upstream.clear()
        early = pool.submit(httpx.post, gateway.url + "/v1/chat/completions", headers=AUTH,
                            timeout=DEADLINE_S, json={"model": "small", "messages": long_messages(seed=11)})
        # Loaded, the pool still cold: readiness names it, and the request waits for a warm worker.
        held = _until(gateway, "/health/readiness", lambda r: r.json()["problems"] == [
            "compression pool: no worker can serve, 1 of 1 starting (warming up)"])
        assert (held.status_code, held.json()["status"]) == (503, "starting")
        assert not early.done()
        starting.unlink()
        response = early.result(timeout=DEADLINE_S)
        assert (response.status_code, response.headers["x-mixpr-action"]) == (200, "compressed")
        [sent] = upstream.received("small")
        assert len(sent.json["messages"][0]["content"]) < len(long_messages(seed=11)[0]["content"]) / 2
        ready = _until(gateway, "/health/readiness", _ok)
        assert ready.json() == {"status": "ready"}
    finally:
        starting.unlink(missing_ok=True)
        pool.shutdown(wait=False, cancel_futures=True)
        gateway.stop()


@pytest.fixture(scope="module")
def gateway(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("startup")
    started = GatewayProcess(_config(folder, upstream), log=folder / "gateway.log", fresh=True).wait()
    yield started
    started.stop()


def test_the_gateway_process_leaves_scikit_learn_to_its_workers(gateway: GatewayProcess) -> None:
    # scikit-learn's import (with SciPy's stats) takes seconds of every start; only the workers weigh words.
    response = httpx.post(gateway.url + "/v1/chat/completions", headers=AUTH, timeout=DEADLINE_S,
                          json={"model": "small", "messages": long_messages(seed=12)})
    assert (response.status_code, response.headers["x-mixpr-action"]) == (200, "compressed")
    assert "/sklearn/" not in _mapped(gateway.process.pid)
    assert any("/sklearn/" in _mapped(child) for child in _children(gateway.process.pid))


def test_a_start_that_fails_behind_the_listening_server_exits_3_and_says_why(tmp_path: Path) -> None:
    """Its own process, about the start: the store's path fails only after the gateway's import
    (LiteLLM), which takes seconds, a minute under load."""
    # The store's path fails in the gateway's own start, after the server listens and the pool has
    # begun to warm: the process still exits as a failed start did, naming the setting, and nothing else.
    config = tmp_path / "config.yaml"
    model = {"model_name": "m", "litellm_params": {"model": "openai/x"}}
    folder = {"stats_path": str(tmp_path)}  # a folder: no store opens there
    # The heuristic router: the auto router's fork server would import LiteLLM too (5 CPU-s) for nothing.
    config.write_text(yaml.safe_dump({"model_list": [model], "general_settings": folder,
                                      "mixpr_settings": {"router": "heuristic"}}))
    argv = [sys.executable, "-m", "gateway", "--config", str(config), "--port", str(closed_port())]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 3
    assert "general_settings.stats_path" in done.stderr and "cannot open the stats store" in done.stderr
    assert "never retrieved" not in done.stderr


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid``: its workers are the fork server's children, not its own."""
    found, stack = [], [pid]
    while stack:
        with_children = stack.pop()
        try:
            children = _children(with_children)
        except FileNotFoundError:  # gone meanwhile
            continue
        found += children
        stack += children
    return found


def _running(pid: int) -> bool:
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")
    except FileNotFoundError:
        return False


def test_a_killed_gateway_leaves_no_worker_or_fork_server_behind(upstream: FakeUpstream,
                                                                 tmp_path: Path) -> None:
    # SIGKILL runs no shutdown: the fork server sees its host's pipe close and exits, and the workers,
    # its children, are signalled as it goes (PR_SET_PDEATHSIG). None may carry on as an orphan.
    gateway = GatewayProcess(_config(tmp_path, upstream), log=tmp_path / "gateway.log", fresh=True).wait()
    try:
        under = _descendants(gateway.process.pid)
        assert any("/sklearn/" in _mapped(pid) for pid in under)  # the warm workers are among them
    finally:
        gateway.kill()
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in under) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in under if _running(pid)]


def test_a_first_request_reads_no_source_file_on_the_loop(upstream: FakeUpstream,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # FastAPI reads and tokenizes an endpoint's source file on its first request (for its error texts),
    # 0.5 to 1 ms of blocking work on the loop; the gateway's warm-up reads them before readiness.
    monkeypatch.setattr(fastapi.routing, "_endpoint_context_cache", {})  # as in a fresh process
    raw = gateway_config(upstream.base_url)
    raw["general_settings"]["compression_executor"] = "thread"  # no pool to start: this is the app's
    server = ServerThread(create_app(parse_config(raw))).start()  # back once warm
    read: list[str] = []
    sourcelines = inspect.getsourcelines
    monkeypatch.setattr(inspect, "getsourcelines", lambda obj: read.append(obj.__name__) or sourcelines(obj))
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http:
            assert http.get("/v1/models").status_code == 200
            chat = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
            assert http.post("/v1/chat/completions", json=chat).status_code == 200
            messages = {"model": "gpt-test", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
            assert http.post("/v1/messages", json=messages).status_code == 200
    finally:
        server.stop()
    assert read == []


def test_a_request_that_finds_no_tokenizer_loaded_loads_it_off_the_loop(
        upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    # A request held while the gateway loaded is served as its warm-up begins, before the warm-up's
    # counts: loading the tokenizer there (half a second to a second) stalled every other request.
    raw = gateway_config(upstream.base_url)
    raw["general_settings"]["compression_executor"] = "thread"
    server = ServerThread(create_app(parse_config(raw))).start()
    on_loop: list[bool] = []
    load = tokens._load

    def recorded(name: str) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return load(name)

    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http:
            _until_ready(http)
            monkeypatch.setattr(tokens, "_LOADED", {})  # as before the warm-up's counts
            tokens.encoding_for.cache_clear()
            monkeypatch.setattr(tokens, "_load", recorded)
            chat = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
            assert http.post("/v1/chat/completions", json=chat).status_code == 200
    finally:
        server.stop()
        tokens.encoding_for.cache_clear()  # what it holds now was loaded for this test
    assert on_loop and not any(on_loop)


def _until_ready(http: httpx.Client) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while http.get("/health/readiness").status_code != 200:
        assert time.monotonic() < deadline, "never ready"
        time.sleep(0.05)
