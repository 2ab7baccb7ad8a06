"""Records summed into what one write adds: the writer folds a burst of requests into one
transaction (SQLite) or one pipeline (Redis) instead of one per request."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from gateway.stats.record import Record, Row

MINUTE = 60
HOUR = 3600

Totals = dict[str, dict[str, float]]  # model -> figure -> value


@dataclass
class Batch:
    totals: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    minutes: dict[tuple[int, str, str], float] = field(default_factory=lambda: defaultdict(float))
    hours: dict[tuple[int, str, str], float] = field(default_factory=lambda: defaultdict(float))
    rows: list[Row] = field(default_factory=list)

    def add(self, record: Record) -> None:
        minute, hour = bucket(record.at, MINUTE), bucket(record.at, HOUR)
        for name, value in record.counts.items():
            if value:
                self.totals[record.model, name] += value
                self.minutes[minute, record.model, name] += value
                self.hours[hour, record.model, name] += value
        if record.row is not None:
            self.rows.append(record.row)

    def __bool__(self) -> bool:
        return bool(self.totals or self.rows)


def bucket(at: float, size: int) -> int:
    """The start (unix seconds) of the ``size``-second bucket holding ``at``."""
    return int(at // size * size)


def add_into(into: Totals, model: str, name: str, value: float) -> None:
    into.setdefault(model, {})
    into[model][name] = into[model].get(name, 0.0) + value
