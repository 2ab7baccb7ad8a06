"""Heaviest test files first, under ``pytest -n N --dist loadfile`` (``make test``; issue 59).

xdist hands out whole files, by default those with the most tests first. The files that take longest
(a browser in front of gateways that restart, the embedded model end to end, the start-up tests) have
few tests, so they came last, and one worker ran the last of them alone for half a minute while the
others had finished: a core idle on a 2-core machine. Here files go out by how long they took when
``tests/durations.json`` was written, longest first; a file it does not know yet goes first, as if it
were the longest (a new file's cost is unknown, and a short one first costs nothing).

``make durations`` rewrites the file (``--store-durations``). A stale file only orders worse: no test
is skipped or changed by it.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

DURATIONS = Path(__file__).with_name("durations.json")


def heaviest_first(files: list[str], seconds: Mapping[str, float]) -> list[str]:
    """``files`` longest first by ``seconds``; those it lacks before all, in their given order."""
    top = max(seconds.values(), default=0.0)
    return sorted(files, key=lambda name: -seconds.get(name, top + 1))  # sorted() is stable


def file_of(nodeid: str) -> str:
    """The file part of a test id, as xdist's loadfile scheduling groups them."""
    return nodeid.split("::", 1)[0]


def load(path: Path) -> dict[str, float]:
    """The stored seconds per file; none when the file is missing or unreadable (default order)."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in stored.items()} if isinstance(stored, dict) else {}


class HeaviestFirst(LoadFileScheduling):
    """xdist's loadfile scheduling, its queue of files reordered once before the first is handed out."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.seconds = load(Path(config.getoption("durations_path")))
        self.ordered = False

    def _assign_work_unit(self, node: Any) -> None:  # xdist's own step: each file handed out here
        if not self.ordered:
            queue = self.workqueue
            order = heaviest_first(list(queue), self.seconds)
            self.workqueue = OrderedDict((name, queue[name]) for name in order)
            self.ordered = True
        super()._assign_work_unit(node)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help="write each test file's seconds to --durations-path (make durations)")
    parser.addoption("--durations-path", default=str(DURATIONS),
                     help="the stored seconds per test file (default: tests/durations.json)")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> HeaviestFirst | None:
    return HeaviestFirst(config, log) if config.getoption("dist") == "loadfile" else None


class _Timer:
    """Sums setup, call and teardown seconds per file, from every worker's reports."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = file_of(report.nodeid)
        self.seconds[name] = self.seconds.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus == 0 and self.seconds:  # a failed or interrupted run times only part of the files
            rounded = {name: round(value, 1) for name, value in sorted(self.seconds.items())}
            self.path.write_text(json.dumps(rounded, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    # Only where reports meet: the controller, or a run without workers.
    if config.getoption("store_durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Timer(Path(config.getoption("durations_path"))), "durations-timer")
