"""The test run's schedule (tests/scheduling.py): the long files it names exist, so none silently goes back to
running last after a rename."""

from __future__ import annotations

from pathlib import Path

from tests.scheduling import LONG_FIRST

ROOT = Path(__file__).resolve().parents[1]


def test_every_long_file_named_first_exists() -> None:
    assert [path for path in LONG_FIRST if not (ROOT / path).is_file()] == []
    assert len(set(LONG_FIRST)) == len(LONG_FIRST)
