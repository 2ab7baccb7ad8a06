"""The stats in the form cache's Redis (``general_settings.form_cache_url``): every replica adds to
the same hashes (HINCRBYFLOAT is atomic), so the page of any replica shows the deployment's figures.

Keys, under ``mixpr:stats:``: ``totals`` (a hash, field ``model\\x1fname``), ``m:<minute>`` and
``h:<hour>`` (hashes that expire with their retention), ``ring`` (a list trimmed to its bound).
"""

from __future__ import annotations

import json
import time

import redis

from gateway.stats.batch import HOUR, MINUTE, Batch, Totals, add_into, bucket
from gateway.stats.store import MINUTES_KEPT_S, whole_hour

PREFIX = "mixpr:stats:"
SEP = "\x1f"  # between model and figure names in a hash field: no config name holds it
TIMEOUT_S = 5.0  # the writer thread and page reads, never a request: a slow Redis only delays them


class RedisStore:
    def __init__(self, url: str, *, retention_days: int, ring: int) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
        self.retention_s = retention_days * 24 * HOUR
        self.ring = ring

    def write(self, batch: Batch) -> None:
        pipe = self.client.pipeline(transaction=False)
        for (model, name), value in batch.totals.items():
            pipe.hincrbyfloat(PREFIX + "totals", model + SEP + name, value)
        self._buckets(pipe, "m:", batch.minutes, MINUTES_KEPT_S)
        self._buckets(pipe, "h:", batch.hours, self.retention_s)
        if batch.rows:
            pipe.lpush(PREFIX + "ring", *(json.dumps(r.as_dict()) for r in batch.rows))
            pipe.ltrim(PREFIX + "ring", 0, self.ring - 1)
        pipe.execute()

    def _buckets(self, pipe: redis.client.Pipeline, kind: str, sums: dict[tuple[int, str, str], float],
                 kept_s: float) -> None:
        for (at, model, name), value in sums.items():
            pipe.hincrbyfloat(PREFIX + kind + str(at), model + SEP + name, value)
        for at in {at for at, _, _ in sums}:  # after the writes: EXPIREAT on a key not yet made does nothing
            pipe.expireat(PREFIX + kind + str(at), int(at + kept_s))

    def totals(self) -> Totals:
        return _parsed(self.client.hgetall(PREFIX + "totals"))

    def since(self, start: float) -> Totals:
        """The minutes to the next whole hour, then whole hours (as ``SqliteStore.since``)."""
        found: Totals = {}
        edge = whole_hour(start)
        parts = [*self._range("m:", start, MINUTE, end=edge).values(),
                 *self._range("h:", edge, HOUR).values()]
        for sums in parts:
            for model, names in sums.items():
                for name, value in names.items():
                    add_into(found, model, name, value)
        return found

    def hours(self, start: float) -> dict[int, Totals]:
        return {at: sums for at, sums in self._range("h:", start, HOUR).items() if sums}

    def _range(self, kind: str, start: float, size: int, *, end: float | None = None) -> dict[int, Totals]:
        """The buckets from ``start``'s to the current one, or up to (without) ``end``."""
        last = bucket(time.time(), size) + 1 if end is None else end
        ats = range(bucket(start, size), int(last), size)
        pipe = self.client.pipeline(transaction=False)
        for at in ats:
            pipe.hgetall(PREFIX + kind + str(at))
        return {at: _parsed(raw) for at, raw in zip(ats, pipe.execute(), strict=True)}

    def recent(self, limit: int) -> list[dict[str, object]]:
        return [json.loads(raw) for raw in self.client.lrange(PREFIX + "ring", 0, min(limit, self.ring) - 1)]

    def close(self) -> None:
        self.client.close()


def _parsed(raw: dict[bytes, bytes]) -> Totals:
    found: Totals = {}
    for key, value in raw.items():
        model, _, name = key.decode().rpartition(SEP)
        add_into(found, model, name, float(value))
    return found
