"""The compression pool survives killed workers: jobs retry once, then fail open, never a 400.

Its other half, a two-worker pool and a stuck job's timeout, is test_workers_timeout.py: every test here
waits for replacement workers to start (seconds each, a minute under load), and ``--dist loadfile`` runs
a file on one xdist worker, so one file holding both halves was the suite's longest.
"""

from __future__ import annotations

import concurrent.futures
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
    hold_switch,
    kill_busy_worker,
    long_messages,
    wait_for,
)

from gateway.compress.compressor import START_SUFFIX
from gateway.run.workers import WORKER_NICENESS


@pytest.fixture(scope="module")
def hold(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with hold_switch(tmp_path_factory.mktemp("pool")) as path:
        yield path


@pytest.fixture(scope="module")
def gateway(upstream: FakeUpstream, hold: Path) -> Iterator[Gateway]:
    server = Gateway(upstream.base_url, compression_workers=1, compression_timeout_s=120)
    yield server
    server.stop()


def _in_background(send: object) -> concurrent.futures.Future:
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(send)
    pool.shutdown(wait=False)
    return future


def test_workers_run_nicer_than_the_event_loop(gateway: Gateway) -> None:
    # When compression and the loop want the same core, the loop (short requests) gets it first.
    [pid] = gateway.workers.pids()
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, mine + WORKER_NICENESS)


def test_a_worker_killed_while_idle_is_replaced_and_readiness_says_so(gateway: Gateway, hold: Path) -> None:
    [pid] = gateway.workers.pids()
    assert gateway.http.get("/health/readiness").json() == {"status": "ready"}
    # The replacement's start is held: forked from a warm fork server it is ready in milliseconds, and
    # readiness polled every 20 ms could miss its 503 (a CI run waited 240 s for it).
    starting = Path(str(hold) + START_SUFFIX)
    starting.touch()
    try:
        os.kill(pid, signal.SIGKILL)
        down = wait_for(lambda: (r := gateway.http.get("/health/readiness")).status_code == 503 and r)
    finally:
        starting.unlink()
    assert down.json()["status"] == "unavailable"
    assert any("compression pool" in p and "worker died" in p for p in down.json()["problems"])
    wait_for(lambda: gateway.http.get("/health/readiness").status_code == 200)
    assert gateway.workers.pids() != [pid]
    response = gateway.chat("small", long_messages(seed=1))
    assert response.status_code == 200
    assert response.headers["x-mixpr-action"] == "compressed"
    assert gateway.metric('mixpr_compression_worker_restarts_total{reason="crash"}') >= 1


def test_a_worker_killed_mid_job_is_replaced_and_the_job_retried(gateway: Gateway, hold: Path) -> None:
    """Waits for a replacement worker's start (its imports; long under load): the retry runs there."""
    hold.touch()
    reply = _in_background(lambda: gateway.chat("small", long_messages(seed=2)))
    killed = kill_busy_worker(gateway.workers)
    hold.unlink()
    response = reply.result(timeout=120)
    assert response.status_code == 200
    assert response.headers["x-mixpr-action"] == "compressed"
    assert killed not in gateway.workers.pids()
    following = gateway.chat("small", long_messages(seed=3))
    assert (following.status_code, following.headers["x-mixpr-action"]) == (200, "compressed")


def test_a_job_whose_worker_dies_twice_fails_open(
    gateway: Gateway, hold: Path, upstream: FakeUpstream
) -> None:
    """Up to a minute or two under load: five worker starts in a row (each kill leaves a one-worker pool
    waiting for a replacement to import MixPR, 5 s on an idle machine) before the next step can run."""
    upstream.clear()
    hold.touch()
    # Too long for the window: nothing can be sent, and it is the server's fault (503, not 400).
    reply = _in_background(lambda: gateway.chat("small", long_messages(seed=4)))
    first = kill_busy_worker(gateway.workers)
    kill_busy_worker(gateway.workers, spare=(first,))
    assert_unavailable(reply.result(timeout=120))
    assert upstream.received("small") == []
    # Fits the window as it is: it goes out unchanged.
    messages = fitting_messages(seed=5)
    reply = _in_background(lambda: gateway.chat("gpt-test", messages, **FORCED))
    first = kill_busy_worker(gateway.workers)
    kill_busy_worker(gateway.workers, spare=(first,))
    response = reply.result(timeout=120)
    assert (response.status_code, response.headers["x-mixpr-action"]) == (200, "passthrough")
    assert upstream.received("echo")[-1].json["messages"] == messages
    hold.unlink()
    following = gateway.chat("small", long_messages(seed=6))
    assert (following.status_code, following.headers["x-mixpr-action"]) == (200, "compressed")
    assert gateway.metric('mixpr_compression_failures_total{cause="crash"}') == 2
