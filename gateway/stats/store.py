"""Where the stats are kept: a SQLite file (the default), or the form cache's Redis, which every
replica writes to, so their figures add up.

Three sums per model and figure: since the store began (``totals``), per minute (kept for the
last day and an hour, for the 1h and 24h windows) and per hour (kept ``retention_days``, for the
chart), plus the bounded per-request record. Writes come from one thread (``gateway.stats.recorder``);
reads from request handlers, in threads of their own, each on its own connection.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Protocol

from gateway.stats.batch import HOUR, MINUTE, Batch, Totals, add_into, bucket

MINUTES_KEPT_S = 25 * HOUR  # the 24h window, and an hour's slack for the one being filled
PRUNE_EVERY_S = 60.0


class Store(Protocol):
    def write(self, batch: Batch) -> None: ...
    def totals(self) -> Totals: ...
    def since(self, start: float) -> Totals: ...
    def hours(self, start: float) -> dict[int, Totals]: ...
    def recent(self, limit: int) -> list[dict[str, object]]: ...
    def close(self) -> None: ...


SCHEMA = """
CREATE TABLE IF NOT EXISTS totals (model TEXT, name TEXT, value REAL, PRIMARY KEY (model, name));
CREATE TABLE IF NOT EXISTS minutes (at INTEGER, model TEXT, name TEXT, value REAL,
                                    PRIMARY KEY (at, model, name));
CREATE TABLE IF NOT EXISTS hours (at INTEGER, model TEXT, name TEXT, value REAL,
                                  PRIMARY KEY (at, model, name));
CREATE TABLE IF NOT EXISTS ring (id INTEGER PRIMARY KEY AUTOINCREMENT, row TEXT);
"""
UPSERT = "INSERT INTO {table} VALUES ({marks}) ON CONFLICT DO UPDATE SET value = value + excluded.value"


class SqliteStore:
    """A SQLite file (``path``), or, for ``None``, a database in this process's memory (the
    figures then last as long as the process)."""

    def __init__(self, path: str | None, *, retention_days: int, ring: int) -> None:
        if path is None:  # one shared in-memory database per store, reachable from every thread
            self.target, self.uri = f"file:mixpr-stats-{id(self)}?mode=memory&cache=shared", True
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.target, self.uri = path, False
        self.retention_s = retention_days * 24 * HOUR
        self.ring = ring
        self.pruned = 0.0
        self._writer = self._connect()  # also keeps an in-memory database alive
        self._writer.executescript(SCHEMA)
        self._local = threading.local()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.target, uri=self.uri, check_same_thread=False, timeout=10)
        if not self.uri:
            db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
        return db

    def _reader(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = self._connect()
        return db

    def write(self, batch: Batch) -> None:
        with self._writer as db:  # one transaction
            db.executemany(UPSERT.format(table="totals", marks="?, ?, ?"),
                           [(m, n, v) for (m, n), v in batch.totals.items()])
            db.executemany(UPSERT.format(table="minutes", marks="?, ?, ?, ?"),
                           [(a, m, n, v) for (a, m, n), v in batch.minutes.items()])
            db.executemany(UPSERT.format(table="hours", marks="?, ?, ?, ?"),
                           [(a, m, n, v) for (a, m, n), v in batch.hours.items()])
            db.executemany("INSERT INTO ring (row) VALUES (?)",
                           [(json.dumps(r.as_dict()),) for r in batch.rows])
            # The ring at its bound on every write (a range of its key); old buckets once a minute.
            db.execute("DELETE FROM ring WHERE id <= (SELECT MAX(id) FROM ring) - ?", (self.ring,))
            self._prune(db)

    def _prune(self, db: sqlite3.Connection) -> None:
        now = time.time()
        if now - self.pruned < PRUNE_EVERY_S:
            return
        self.pruned = now
        db.execute("DELETE FROM minutes WHERE at < ?", (bucket(now - MINUTES_KEPT_S, MINUTE),))
        db.execute("DELETE FROM hours WHERE at < ?", (bucket(now - self.retention_s, HOUR),))

    def totals(self) -> Totals:
        return _summed(self._reader().execute("SELECT model, name, value FROM totals"))

    def since(self, start: float) -> Totals:
        """From ``start``'s minute: the minutes to the next whole hour, then whole hours (a day's
        window reads 24 hour rows and up to 60 minute rows per figure, not 1,440)."""
        edge = whole_hour(start)
        rows = self._reader().execute(
            "SELECT model, name, SUM(value) FROM (SELECT model, name, value FROM minutes WHERE at >= ? "
            "AND at < ? UNION ALL SELECT model, name, value FROM hours WHERE at >= ?) GROUP BY model, name",
            (bucket(start, MINUTE), edge, edge))
        return _summed(rows)

    def hours(self, start: float) -> dict[int, Totals]:
        found: dict[int, Totals] = {}
        rows = self._reader().execute("SELECT at, model, name, value FROM hours WHERE at >= ?",
                                      (bucket(start, HOUR),))
        for at, model, name, value in rows:
            add_into(found.setdefault(at, {}), model, name, value)
        return found

    def recent(self, limit: int) -> list[dict[str, object]]:
        rows = self._reader().execute("SELECT row FROM ring ORDER BY id DESC LIMIT ?",
                                      (min(limit, self.ring),))
        return [json.loads(row) for (row,) in rows]

    def close(self) -> None:
        self._writer.close()


def whole_hour(start: float) -> int:
    """The first hour bucket that begins at or after ``start``'s minute."""
    minute = bucket(start, MINUTE)
    return minute if minute % HOUR == 0 else bucket(minute, HOUR) + HOUR


def _summed(rows: sqlite3.Cursor) -> Totals:
    found: Totals = {}
    for model, name, value in rows:
        add_into(found, model, name, value)
    return found
