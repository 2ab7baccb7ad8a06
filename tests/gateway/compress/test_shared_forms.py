"""The form cache replicas share through Redis: a real ``redis-server`` on 127.0.0.1 (killed, stopped,
full), and ``SharedForms`` as the gateway's loop uses it."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path

import pytest
from conftest import closed_port
from redis_server import MISSING, RedisServer, available

from gateway.compress.shared_forms import SharedForms, decoded, encoded
from gateway.metrics import Metrics

TIMEOUT_S = 0.1


def _shared(url: str, metrics: Metrics | None = None, **options: int) -> SharedForms:
    settings = {"ttl_s": 3600, "max_entry_bytes": 64 * 1024, **options}
    return SharedForms(url, timeout_s=TIMEOUT_S, metrics=metrics, **settings)


def _names(count: int) -> list[str]:
    run = uuid.uuid4().hex[:8]  # the session's Redis is shared by the tests: names of their own
    return [f"{run}-{i}" for i in range(count)]


def _errors(metrics: Metrics, cause: str) -> float:
    return metrics.registry.get_sample_value("mixpr_form_cache_errors_total", {"cause": cause}) or 0.0


async def test_what_one_replica_stores_another_fetches_in_one_round_trip(redis_server: RedisServer) -> None:
    names = _names(300)
    forms = {name: (f"form of {name} \U0001f600", i) for i, name in enumerate(names)}
    writer = _shared(redis_server.url)
    writer.store(forms)
    await writer.aclose()  # waits for the write-back
    reader = _shared(redis_server.url)
    with redis_server.client() as admin:
        before = admin.info("commandstats").get("cmdstat_mget", {}).get("calls", 0)
        found = await reader.fetch([*names, "never-stored"])
        after = admin.info("commandstats")["cmdstat_mget"]["calls"]
    await reader.aclose()
    assert found == forms
    assert after - before == 1


async def test_entries_expire_and_big_ones_stay_local(redis_server: RedisServer) -> None:
    small, big = _names(2)
    shared = _shared(redis_server.url, ttl_s=30, max_entry_bytes=2048)
    shared.store({small: ("short", 1), big: ("x" * 4096, 1000)})
    await shared.aclose()
    with redis_server.client() as admin:
        assert 0 < admin.ttl(shared.prefix + small) <= 30
        assert not admin.exists(shared.prefix + big)


async def test_a_full_redis_is_counted_never_raised(tmp_path: Path) -> None:
    if not available():
        pytest.skip(MISSING)
    server = RedisServer(tmp_path, maxmemory="2mb", policy="noeviction").start()
    try:
        metrics = Metrics()
        shared = _shared(server.url, metrics, max_entry_bytes=1024 * 1024)
        kept = _names(1)[0]
        shared.store({kept: ("kept", 1)})
        for batch in range(8):  # ~4 MB into 2 MB: Redis answers OOM
            shared.store({f"{kept}-{batch}-{i}": ("y" * 100_000, 1) for i in range(5)})
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        assert _errors(metrics, "full") >= 1
        assert await shared.fetch([kept]) == {kept: ("kept", 1)}  # reads go on
        await shared.aclose()
    finally:
        server.stop()


async def test_no_redis_costs_one_timeout_and_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    shared = _shared(f"redis://127.0.0.1:{closed_port()}/0", metrics)
    names = _names(3)
    with caplog.at_level(logging.WARNING, logger="gateway.compress.shared_forms"):
        started = time.perf_counter()
        results = [await shared.fetch(names) for _ in range(5)]
        shared.store({names[0]: ("form", 1)})  # resting: not even tried
        elapsed = time.perf_counter() - started
    await shared.aclose()
    assert results == [{}] * 5
    assert elapsed < 5 * TIMEOUT_S  # one try; the others wait for RETRY_AFTER_S to pass
    assert _errors(metrics, "unavailable") == 1
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "unavailable" in warnings[0] and "127.0.0.1" not in warnings[0]


async def test_a_stopped_redis_answers_within_the_timeout(tmp_path: Path) -> None:
    if not available():
        pytest.skip(MISSING)
    server = RedisServer(tmp_path).start()
    try:
        metrics = Metrics()
        shared = _shared(server.url, metrics)
        names = _names(2)
        shared.store({names[0]: ("form", 7)})
        await asyncio.sleep(0.2)
        server.pause()
        started = time.perf_counter()
        assert await shared.fetch(names) == {}
        assert time.perf_counter() - started < TIMEOUT_S + 0.5
        assert _errors(metrics, "timeout") == 1
        server.resume()
        shared._resting_until = 0.0  # as if RETRY_AFTER_S had passed
        assert await shared.fetch(names) == {names[0]: ("form", 7)}  # the connection pool recovered
        await shared.aclose()
    finally:
        server.stop()


def test_stored_values_round_trip_and_foreign_ones_are_misses() -> None:
    form = ("a lone \ud800 surrogate from a JSON escape, and é", 12)
    assert decoded(encoded(form)) == form
    assert decoded(b"not a form") is None
    assert decoded(b"12\n\xff\xfe") is None
