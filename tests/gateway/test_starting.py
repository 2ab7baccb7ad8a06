"""``gateway.starting``: the server listens before the gateway is built (issue 59). Served by uvicorn on a
real socket, with a build the test holds: health answers at once, other requests wait for the gateway,
and a build that fails says so and stops the server."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread, gateway_config
from fake_upstream import FakeUpstream

from gateway import create_app
from gateway.config import parse_config
from gateway.starting import LOADING, Starting

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}


class HeldBuild:
    """Builds the real gateway (thread workers) once the test releases it, or raises ``fail``."""

    def __init__(self, upstream: FakeUpstream, fail: Exception | None = None) -> None:
        self.release = threading.Event()
        self.raw = gateway_config(upstream.base_url)
        self.raw["general_settings"]["compression_executor"] = "thread"
        self.fail = fail
        self.stopped = threading.Event()

    def __call__(self, loop: asyncio.AbstractEventLoop) -> Any:
        assert self.release.wait(120)
        if self.fail is not None:
            raise self.fail
        return create_app(parse_config(self.raw))


@pytest.fixture
def background() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    yield pool
    pool.shutdown(wait=False, cancel_futures=True)


def _ready(url: str) -> httpx.Response:
    deadline = time.monotonic() + 120
    while (answer := httpx.get(url + "/health/readiness")).status_code != 200:
        assert answer.json()["status"] == "starting" and time.monotonic() < deadline, answer.json()
        time.sleep(0.05)
    return answer


def _serve(build: HeldBuild) -> ServerThread:
    return ServerThread(Starting(build, stop=build.stopped.set)).start()


def test_health_answers_while_the_gateway_loads_and_requests_wait_for_it(
    upstream: FakeUpstream, background: concurrent.futures.ThreadPoolExecutor
) -> None:
    build = HeldBuild(upstream)
    server = _serve(build)
    try:
        alive = httpx.get(server.url + "/health/liveliness")
        assert (alive.status_code, alive.json()) == (200, {"status": "alive"})
        ready = httpx.get(server.url + "/health/readiness")
        assert (ready.status_code, ready.json()) == (503, {"status": "starting", "problems": [LOADING]})
        models = background.submit(httpx.get, server.url + "/v1/models", headers=AUTH, timeout=120)
        assert not models.done()  # nothing to answer it with yet
        build.release.set()
        assert [m["id"] for m in models.result(120).json()["data"]][:2] == ["gpt-test", "small"]
        assert _ready(server.url).json() == {"status": "ready"}  # once its pool is warm
        assert not build.stopped.is_set()
    finally:
        build.release.set()
        server.stop()


def test_a_gateway_that_fails_to_build_says_why_and_stops_the_server(
    upstream: FakeUpstream, background: concurrent.futures.ThreadPoolExecutor
) -> None:
    build = HeldBuild(upstream, fail=RuntimeError("no tokenizer files"))
    server = _serve(build)
    try:
        waiting = background.submit(httpx.get, server.url + "/v1/models", headers=AUTH, timeout=120)
        build.release.set()
        assert build.stopped.wait(120)
        answer = waiting.result(120)
        assert (answer.status_code, answer.json()["error"]["code"]) == (503, "gateway_unavailable")
        ready = httpx.get(server.url + "/health/readiness")
        assert (ready.status_code, ready.json()) == (
            503, {"status": "failed", "error": "RuntimeError: no tokenizer files", "problems": []})
    finally:
        server.stop()
