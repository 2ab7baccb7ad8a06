"""A pool closed while its workers still import and warm kills them: a failed start, or a stop that comes
during the warm-up, exits at once rather than after the warm-up (seconds, a minute under load)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing.process
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.compress.compressor import START_SUFFIX, TEST_HOLD_ENV, _warm_up
from gateway.run.workers import Workers


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(child) for child in (task / "children").read_text().split()}
    return found


def _spawned_children() -> set[int]:
    """This process's workers: the children of its fork server (not the resource tracker)."""
    servers = [c for c in _children(os.getpid()) if b"forkserver" in Path(f"/proc/{c}/cmdline").read_bytes()]
    return {worker for server in servers for worker in _children(server)}


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


async def _until(condition: Callable[[], object], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_a_pool_closed_while_warming_kills_its_starting_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hold = tmp_path / "hold"
    Path(str(hold) + START_SUFFIX).touch()  # the warm-up waits while this exists: it never ends here
    monkeypatch.setenv(TEST_HOLD_ENV, str(hold))
    before = _spawned_children()
    workers = Workers(workers=1, executor="process")
    starting = asyncio.ensure_future(workers.start(_warm_up, False))
    await _until(lambda: _spawned_children() - before)
    [worker] = _spawned_children() - before
    workers.close()
    await _until(lambda: not _alive(worker), timeout=10)
    with pytest.raises(asyncio.CancelledError):
        await starting


async def test_a_pool_closed_while_the_executor_records_a_forked_worker_kills_it_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fork server forks a worker before the executor records it (``Process.start`` returns, then
    the table gets its pid): a close in between found no process to kill, and the worker warmed on."""
    hold = tmp_path / "hold"
    Path(str(hold) + START_SUFFIX).touch()
    monkeypatch.setenv(TEST_HOLD_ENV, str(hold))
    forked = threading.Event()
    start = multiprocessing.process.BaseProcess.start

    def slow_to_record(process: multiprocessing.process.BaseProcess) -> None:
        start(process)
        forked.set()
        time.sleep(2)  # the worker runs; the executor has not recorded it yet

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", slow_to_record)
    before = _spawned_children()
    workers = Workers(workers=1, executor="process")
    starting = asyncio.ensure_future(workers.start(_warm_up, False))
    await _until(forked.is_set)
    [worker] = _spawned_children() - before
    try:
        workers.close()
        await _until(lambda: not _alive(worker), timeout=10)
        with pytest.raises(asyncio.CancelledError):
            await starting
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)  # when the test fails: no worker left warming
