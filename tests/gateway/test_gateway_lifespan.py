"""Managed model servers start with the gateway; readiness waits for them, failures are reported."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from conftest import ServerThread, closed_port

from gateway import create_app
from gateway.config import parse_config

MANAGED = {"kind": "xllamacpp", "model_path": "x.gguf", "port": 4999}


class FakeManagedServer:
    """Stands in for gateway.local.managed.ManagedServer: starts when the test says so."""

    instances: list[FakeManagedServer] = []
    fail_with: str | None = None

    def __init__(self, settings: dict[str, Any], *, on_restart: Any = None) -> None:
        self.settings = settings
        self.release = threading.Event()
        self.ready = False
        self.stopped = False
        FakeManagedServer.instances.append(self)

    retry_after = 1

    @property
    def problem(self) -> str | None:
        return None if self.ready else "managed server starting"

    async def start(self) -> None:
        import asyncio

        while not self.release.is_set():
            await asyncio.sleep(0.01)
        if self.fail_with:
            raise RuntimeError(self.fail_with)
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        self.stopped = True


@pytest.fixture
def fake_managed(monkeypatch: pytest.MonkeyPatch) -> type[FakeManagedServer]:
    monkeypatch.setattr("gateway.local.managed.ManagedServer", FakeManagedServer)
    FakeManagedServer.instances = []
    FakeManagedServer.fail_with = None
    return FakeManagedServer


def _serve() -> ServerThread:
    config = parse_config({
        "model_list": [{"model_name": "local", "litellm_params": {"model": "openai/x"},
                        "managed_server": MANAGED}],
        "mixpr_settings": {"router": "heuristic"},
        "general_settings": {"compression_executor": "thread"},
    })
    return ServerThread(create_app(config)).start()


def _wait_for(condition: Any) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_readiness_waits_for_managed_servers(fake_managed: type[FakeManagedServer]) -> None:
    server = _serve()
    try:
        [managed] = fake_managed.instances
        assert managed.settings == MANAGED
        live = httpx.get(server.url + "/health/liveliness")
        ready = httpx.get(server.url + "/health/readiness")
        assert (live.status_code, ready.status_code, ready.json()) == (
            200, 503, {"status": "starting", "problems": ["model 'local': managed server starting"]})
        managed.release.set()
        _wait_for(lambda: httpx.get(server.url + "/health/readiness").status_code == 200)
    finally:
        server.stop()
    assert managed.stopped


def test_a_managed_server_that_fails_is_reported(fake_managed: type[FakeManagedServer]) -> None:
    fake_managed.fail_with = "model file not found"
    server = _serve()
    try:
        fake_managed.instances[0].release.set()
        _wait_for(lambda: httpx.get(server.url + "/health/readiness").json()["status"] != "starting")
        ready = httpx.get(server.url + "/health/readiness")
        assert (ready.status_code, ready.json()) == (
            503, {"status": "failed", "error": "RuntimeError: model file not found",
                  "problems": ["model 'local': managed server starting"]})
    finally:
        server.stop()


def test_a_managed_server_that_stops_answering_is_a_503(fake_managed: type[FakeManagedServer]) -> None:
    # The process died but its exit is not noticed yet: "ready", yet the port refuses connections.
    config = parse_config({
        "model_list": [{"model_name": "local", "managed_server": MANAGED,
                        "litellm_params": {"model": "openai/x", "api_key": "none",
                                           "api_base": f"http://127.0.0.1:{closed_port()}/v1"}}],
        "mixpr_settings": {"router": "heuristic"},
        "general_settings": {"compression_executor": "thread"},
    })
    server = ServerThread(create_app(config)).start()
    try:
        fake_managed.instances[0].release.set()
        _wait_for(lambda: httpx.get(server.url + "/health/readiness").status_code == 200)
        response = httpx.post(server.url + "/v1/chat/completions", timeout=30,
                              json={"model": "local", "messages": [{"role": "user", "content": "hi"}]})
        assert (response.status_code, response.headers["retry-after"]) == (503, "1")
        assert response.json()["error"] == {
            "message": "The model `local` is unavailable right now (managed server stopped answering); "
                       "retry in 1 s.", "type": "api_error", "param": None, "code": "model_unavailable"}
    finally:
        server.stop()
