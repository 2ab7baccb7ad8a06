"""Separate gateways for pool tests, held compression jobs, and killing their workers.

A test holds jobs on their worker by creating a file named by ``gateway.compress.compressor.TEST_HOLD_ENV``
(a test-only switch, set before the gateway's workers start); then it can kill the worker that
holds a job, let the job time out, or fill the queue behind it, deterministically.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread, gateway_config
from corpus import QUESTION, haystack

from gateway import create_app
from gateway.compress.compressor import TEST_HOLD_ENV
from gateway.config import parse_config
from gateway.run.workers import Workers

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}


class Gateway:
    """One gateway with its own settings, serving from a thread; ``workers`` is its pool."""

    def __init__(self, upstream_base: str, **general: Any) -> None:
        raw = gateway_config(upstream_base)
        raw["general_settings"].update(general)
        app = create_app(parse_config(raw))
        self.state = app.state.gateway
        self.server = ServerThread(app).start()
        self.http = httpx.Client(base_url=self.server.url, headers=AUTH, timeout=120)

    @property
    def workers(self) -> Workers:
        return self.state.chat.compressor.workers

    def chat(self, model: str, messages: list[dict], **body: Any) -> httpx.Response:
        return self.http.post("/v1/chat/completions", json={"model": model, "messages": messages, **body})

    def metric(self, name: str) -> float:
        """A sample's value from /metrics (0 when absent), e.g. 'mixpr_requests_shed_total{limit="x"}'."""
        for line in self.http.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return 0.0

    def stop(self) -> None:
        self.http.close()
        self.server.stop()


def assert_unavailable(response: httpx.Response) -> None:
    """A 503 for a compression the pool could not run, on a prompt that does not fit as it is."""
    assert response.status_code == 503
    assert int(response.headers["retry-after"]) >= 1
    error = response.json()["error"]
    assert error["code"] == "compression_unavailable"
    assert error["type"] == "api_error"
    assert "does not fit" in error["message"]


@contextmanager
def hold_switch(directory: Path) -> Iterator[Path]:
    """Set the test-only hold variable for gateways started inside; yields the file that holds jobs."""
    path = directory / "hold-jobs"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(TEST_HOLD_ENV, str(path))
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)


def wait_for(condition: Callable[[], Any], timeout: float = 240) -> Any:
    """``condition()``'s first true value. A replacement worker imports for seconds, and for over a minute
    on a busy 2-core machine running the tests in parallel: the timeout only bounds a hang."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
    return value


def kill_busy_worker(workers: Workers, spare: tuple[int, ...] = ()) -> int:
    """SIGKILL (as the OOM killer would) the first worker seen running a job, not one in ``spare``."""
    [pid, *_] = wait_for(lambda: [p for p in workers.pids(busy=True) if p not in spare])
    os.kill(pid, signal.SIGKILL)
    return pid


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def long_messages(seed: int = 0) -> list[dict]:
    """About 11k tokens: far over the 3k window of model ``small``."""
    return [{"role": "user", "content": haystack(600, seed=seed) + "\n\n" + QUESTION}]


def fitting_messages(seed: int = 0) -> list[dict]:
    """About 1k tokens: compressed by model ``gpt-test`` only with FORCED, fits its window as is."""
    return [{"role": "user", "content": haystack(60, seed=seed) + "\n\n" + QUESTION}]


FORCED = {"mixpr": {"enabled": True, "budget_tokens": 100}}
SHORT = [{"role": "user", "content": "Hello there."}]
