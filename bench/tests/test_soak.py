"""bench.soak finds the compression workers it kills, as the gateway's pool lays them out."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os

import psutil

from bench.soak import compression_workers


def test_workers_forked_by_a_fork_server_are_found() -> None:
    # The gateway's pool forks its workers from a fork server (issue 59): they are its children, not the
    # gateway's, and the soak killed none of them while it looked at the gateway's children only.
    context = multiprocessing.get_context("forkserver")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        worker = pool.submit(os.getpid).result()  # a builtin: the worker imports nothing of this module
        found = {p.pid for p in compression_workers(psutil.Process())}
    assert worker in found
    assert os.getpid() not in found
