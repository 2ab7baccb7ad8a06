"""The store the config names: the form cache's Redis when one is set (the replicas share it),
else SQLite at ``stats_path`` (or in memory). Given the settings' values, not the config: the
config module imports the layers this one sits below."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.stats.recorder import Recorder
from gateway.stats.redis_store import RedisStore
from gateway.stats.store import SqliteStore, Store


def open_store(*, redis_url: str | None, path: str | None, retention_days: int, ring: int) -> Store:
    if redis_url:
        return RedisStore(redis_url, retention_days=retention_days, ring=ring)
    return SqliteStore(path, retention_days=retention_days, ring=ring)


@dataclass(frozen=True)
class Stats:
    """The open store, and the recorder that writes to it off the request path."""

    store: Store
    recorder: Recorder

    def close(self) -> None:
        self.recorder.close()  # writes what is queued, then closes the store


def open_stats(*, redis_url: str | None, path: str | None, retention_days: int, ring: int) -> Stats:
    store = open_store(redis_url=redis_url, path=path, retention_days=retention_days, ring=ring)
    return Stats(store, Recorder(store))
