"""Conversation builds wait on the compression pool in their own threads, not the shared ones that
parse big bodies: a big passthrough request answers while cold builds wait (real sockets, a real
worker process held on a job)."""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from corpus import haystack
from fake_upstream import FakeUpstream
from pool_control import Gateway, hold_switch, long_messages, wait_for


@pytest.fixture
def hold(tmp_path: Path) -> Iterator[Path]:
    with hold_switch(tmp_path) as path:
        yield path


def _agent_loop(seed: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find the vault code in the logs."}]
    for step in range(3):
        call = {"id": f"c{step}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"cat log{step}"})}}
        messages += [{"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{step}", "content": haystack(120, seed=seed + step)}]
    return messages


def test_a_big_passthrough_answers_while_two_cold_builds_wait_on_the_pool(upstream: FakeUpstream,
                                                                          hold: Path) -> None:
    gateway = Gateway(upstream.base_url, compression_workers=1)
    big = [{"role": "user", "content": haystack(2_000)[:300_000]}]  # parsed off the loop (> 256 kB)
    with concurrent.futures.ThreadPoolExecutor(4) as clients:
        try:
            hold.touch()  # a long prompt's job holds the only worker
            replies = [clients.submit(gateway.chat, "small", long_messages())]
            wait_for(lambda: gateway.workers.pids(busy=True))
            replies += [clients.submit(gateway.chat, "small", _agent_loop(seed)) for seed in (1, 10)]
            wait_for(lambda: gateway.state.chat.compressor.queue.used == 3)  # both builds reached the pool
            started = time.perf_counter()
            passed = httpx.post(f"{gateway.server.url}/v1/chat/completions", headers=gateway.http.headers,
                                json={"model": "gpt-test", "messages": big, "mixpr": {"enabled": False}},
                                timeout=30)
            elapsed = time.perf_counter() - started
            assert passed.status_code == 200 and hold.exists()  # the builds still wait
            assert elapsed < 5.0, f"{elapsed:.1f} s"  # generous: bench.builds prints the figure
        finally:
            hold.unlink(missing_ok=True)
            answers = [reply.result().status_code for reply in replies]
            gateway.stop()
    assert answers == [200, 200, 200]
