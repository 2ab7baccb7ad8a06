"""The stats store (``gateway.stats``): kept across a reopen, in SQLite and in a real Redis shared by
two writers; windows cut to the minute; the per-request record and the per-hour sums bounded; the
recorder never blocks its caller, however slow the store."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import MISSING, RedisServer, available

from gateway.stats import figures
from gateway.stats.batch import Batch
from gateway.stats.record import Record, Row
from gateway.stats.recorder import Recorder
from gateway.stats.redis_store import RedisStore
from gateway.stats.store import SqliteStore, Store

NOW = time.time()


TIER = "billed=base; kept-under=40000"


def _record(at: float, model: str = "m", before: int = 1000, after: int = 400) -> Record:
    row = Row(at=at, model=model, route="local", action="compressed", tokens_before=before,
              tokens_after=after, reset=False, cache="warm", prices="litellm",
              tier=TIER if model == "a" else "")
    counts = {"requests": 1.0, "requests_compressed": 1.0, "tokens_before": float(before),
              "tokens_after": float(after), "tokens_saved": float(before - after),
              "saved_compression": (before - after) * 1e-6}
    return Record(at=at, model=model, counts=counts, row=row)


def _write(store: Store, *records: Record) -> None:
    batch = Batch()
    for record in records:
        batch.add(record)
    store.write(batch)


def _check_kept(store: Store) -> None:
    """What ``_fill`` wrote: two models, one request two hours ago."""
    totals = store.totals()
    assert totals["a"]["requests"] == 3 and totals["a"]["tokens_saved"] == 1800
    assert totals["b"]["tokens_before"] == 50 and totals["b"]["requests"] == 1
    assert store.since(NOW - 3600)["a"]["requests"] == 2  # the one two hours ago is outside
    assert store.since(NOW - 3 * 3600)["a"]["requests"] == 3
    # An hour that holds only "b" (its request a second before NOW, an hour having begun since "a"'s)
    # has no "a".
    assert sum(s.get("a", {}).get("requests", 0) for s in store.hours(NOW - 3 * 3600).values()) == 3
    rows = store.recent(10)
    assert [r["model"] for r in rows] == ["b", "a", "a", "a"]  # newest first
    assert rows[0]["tokens_before"] == 50 and rows[0]["action"] == "compressed"
    assert [r["tier"] for r in rows] == ["", TIER, TIER, TIER]  # "" for a model without a tier


def _fill(store: Store) -> None:
    _write(store, _record(NOW - 2 * 3600, "a"), _record(NOW - 60, "a"))
    _write(store, _record(NOW - 30, "a"), _record(NOW - 1, "b", before=50, after=50))


def test_sqlite_keeps_the_figures_across_a_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "data" / "stats.sqlite3")
    store = SqliteStore(path, retention_days=90, ring=100)
    _fill(store)
    _check_kept(store)
    store.close()
    reopened = SqliteStore(path, retention_days=90, ring=100)
    _check_kept(reopened)
    reopened.close()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    if not available():
        pytest.skip(MISSING)
    server = RedisServer(tmp_path / "redis").start()
    yield server.url
    server.stop()


def test_redis_keeps_the_figures_and_two_replicas_add_up(redis_url: str) -> None:
    first, second = (RedisStore(redis_url, retention_days=90, ring=100) for _ in range(2))
    _write(first, _record(NOW - 2 * 3600, "a"), _record(NOW - 60, "a"))
    _write(second, _record(NOW - 30, "a"), _record(NOW - 1, "b", before=50, after=50))
    for store in (first, second):
        _check_kept(store)
        store.close()
    reopened = RedisStore(redis_url, retention_days=90, ring=100)
    _check_kept(reopened)
    # Every bucket expires with its retention: nothing in Redis grows without end.
    keys = [k.decode() for k in reopened.client.keys("mixpr:stats:[mh]:*")]
    assert keys and all(0 < reopened.client.ttl(k) for k in keys)
    reopened.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_the_per_request_record_is_bounded(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if kind == "redis":
        store: Store = RedisStore(request.getfixturevalue("redis_url"), retention_days=1, ring=10)
    else:
        store = SqliteStore(str(tmp_path / "s.sqlite3"), retention_days=1, ring=10)
    for i in range(5):
        _write(store, *(_record(NOW - 100 + i * 5 + j, before=1000 + i * 5 + j) for j in range(5)))
    rows = store.recent(1000)
    assert [r["tokens_before"] for r in rows] == list(range(1024, 1014, -1))
    assert store.totals()["m"]["requests"] == 25  # the sums keep every request
    assert _kept_rows(store) == 10  # what is stored, not only what a read returns
    store.close()


def _kept_rows(store: Store) -> int:
    if isinstance(store, RedisStore):
        return int(store.client.llen("mixpr:stats:ring"))
    with sqlite3.connect(store.target) as db:  # type: ignore[attr-defined]
        return int(db.execute("SELECT COUNT(*) FROM ring").fetchone()[0])


def test_sqlite_drops_hours_past_their_retention_and_keeps_the_totals(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.sqlite3"), retention_days=1, ring=10)
    _write(store, _record(NOW - 3 * 24 * 3600), _record(NOW - 10))
    assert sum(s["m"]["requests"] for s in store.hours(0).values()) == 1
    assert store.totals()["m"]["requests"] == 2
    store.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_windows_are_cut_to_the_minute(kind: str, request: pytest.FixtureRequest) -> None:
    if kind == "redis":
        store: Store = RedisStore(request.getfixturevalue("redis_url"), retention_days=90, ring=100)
    else:
        store = SqliteStore(None, retention_days=90, ring=100)  # in memory
    # Either side of each window's edge by two minutes: the edges fall inside hours, not on them.
    ago = [25 * 3600, 24 * 3600 - 120, 24 * 3600 + 120, 2 * 3600, 3600 + 120, 3600 - 120, 10 * 60]
    _write(store, *(_record(NOW - s) for s in ago))
    seen = {w: figures.read(store, w, now=NOW)["totals"]["requests"] for w in figures.WINDOWS}
    assert seen == {"all": 7, "24h": 5, "1h": 2}
    one_hour = figures.read(store, "1h", now=NOW)
    assert len(one_hour["recent"]) == 2 and one_hour["models"]["m"]["tokens_saved"] == 1200
    store.close()


OLD_ROW = {"at": NOW - 10, "model": "a", "route": "local", "action": "compressed", "tokens_before": 9,
           "tokens_after": 4, "reset": False, "cache": "", "prices": "litellm"}  # before the tier


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_rows_written_before_the_tier_read_with_an_empty_one(kind: str, tmp_path: Path,
                                                             request: pytest.FixtureRequest) -> None:
    """A store kept from a gateway without the tier: its old rows read with tier "", beside new rows
    with theirs, so the page's column is never missing."""
    if kind == "redis":
        store: Store = RedisStore(request.getfixturevalue("redis_url"), retention_days=90, ring=100)
        store.client.lpush("mixpr:stats:ring", json.dumps(OLD_ROW))
    else:
        path = tmp_path / "old.sqlite3"
        with sqlite3.connect(path) as db:
            db.executescript("CREATE TABLE ring (id INTEGER PRIMARY KEY AUTOINCREMENT, row TEXT);")
            db.execute("INSERT INTO ring (row) VALUES (?)", (json.dumps(OLD_ROW),))
        db.close()
        store = SqliteStore(str(path), retention_days=90, ring=100)
    _write(store, _record(NOW - 1, "a"))
    assert [(r["tokens_before"], r["tier"]) for r in store.recent(10)] == [(1000, TIER), (9, "")]
    store.close()


class SlowStore:
    """A store whose writes wait until released: a disk or a Redis that stalls."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.written: list[Batch] = []

    def write(self, batch: Batch) -> None:
        self.release.wait(30)
        self.written.append(batch)

    def close(self) -> None:
        self.release.set()


def test_the_recorder_never_blocks_its_caller() -> None:
    store = SlowStore()
    recorder = Recorder(store)  # type: ignore[arg-type]
    # Added from another thread, so that a recorder that blocked would fail this test, not hang it.
    adding = threading.Thread(target=lambda: [recorder.add(_record(NOW + i)) for i in range(1000)],
                              daemon=True)
    adding.start()
    adding.join(5)
    stalled = adding.is_alive()
    assert not recorder.flush(timeout=0.2)
    store.release.set()
    assert not stalled  # queued, not written: the store was stalled all along
    assert recorder.flush(timeout=10)
    assert sum(b.totals["m", "requests"] for b in store.written) == 1000
    recorder.close()
