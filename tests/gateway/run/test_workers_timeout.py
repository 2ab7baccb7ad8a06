"""The compression pool's capacity and its timeout: one of two workers replaced keeps it ready, and a
job stuck past ``compression_timeout_s`` is killed and fails open.

Split from test_workers.py (its killed-worker half): each waits for replacement workers to start, and
``--dist loadfile`` runs one file on one xdist worker, so the two halves now run side by side.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_upstream import FakeUpstream
from pool_control import (
    FORCED,
    Gateway,
    assert_unavailable,
    fitting_messages,
    gone,
    hold_switch,
    long_messages,
    wait_for,
)

from gateway.compress.compressor import START_SUFFIX


@pytest.fixture(scope="module")
def hold(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with hold_switch(tmp_path_factory.mktemp("pool")) as path:
        yield path


@pytest.fixture(scope="module")
def pair(upstream: FakeUpstream, hold: Path) -> Iterator[Gateway]:
    server = Gateway(upstream.base_url, compression_workers=2, compression_timeout_s=120)
    yield server
    server.stop()


def test_readiness_stays_ready_while_one_of_two_workers_is_replaced(pair: Gateway, hold: Path) -> None:
    """Waits for two replacement workers' starts at the end (their imports; long under load)."""
    starting = Path(str(hold) + START_SUFFIX)
    first, second = pair.workers.pids()
    starting.touch()  # replacements now take as long as the test needs
    try:
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: pair.metric("mixpr_compression_workers_live") == 1)
        probes = [pair.http.get("/health/readiness") for _ in range(10)]
        assert [p.status_code for p in probes] == [200] * 10  # reduced capacity, still serving
        compressed = pair.chat("small", long_messages(seed=7))
        assert (compressed.status_code, compressed.headers["x-mixpr-action"]) == (200, "compressed")
        os.kill(second, signal.SIGKILL)  # now no worker can serve: readiness says so
        down = wait_for(lambda: (r := pair.http.get("/health/readiness")).status_code == 503 and r)
        assert pair.metric("mixpr_compression_workers_live") == 0
        assert any("no worker can serve" in p and "worker died" in p for p in down.json()["problems"])
    finally:
        starting.unlink(missing_ok=True)
    wait_for(lambda: pair.metric("mixpr_compression_workers_live") == 2)
    assert pair.http.get("/health/readiness").status_code == 200


@pytest.fixture(scope="module")
def impatient(upstream: FakeUpstream, hold: Path) -> Iterator[Gateway]:
    server = Gateway(upstream.base_url, compression_workers=1, compression_timeout_s=2)
    yield server
    server.stop()


def test_a_job_past_the_timeout_is_killed_and_fails_open(impatient: Gateway, hold: Path) -> None:
    """Two jobs wait out the 2 s timeout, and each killed worker's replacement must start before the
    next job runs: a minute under load."""
    hold.touch()
    [stuck] = impatient.workers.pids()
    assert_unavailable(impatient.chat("small", long_messages(seed=7)))
    wait_for(lambda: gone(stuck))  # killed, not left burning a CPU
    response = impatient.chat("gpt-test", fitting_messages(seed=8), **FORCED)
    assert (response.status_code, response.headers["x-mixpr-action"]) == (200, "passthrough")
    hold.unlink()
    following = impatient.chat("small", long_messages(seed=9))
    assert (following.status_code, following.headers["x-mixpr-action"]) == (200, "compressed")
    assert impatient.metric('mixpr_compression_failures_total{cause="timeout"}') == 2
    assert impatient.metric('mixpr_compression_worker_restarts_total{reason="timeout"}') == 2
