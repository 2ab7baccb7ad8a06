"""``make test`` hands out the longest test files first (tests/schedule.py): checked on a real xdist run
of generated files, whose one worker runs them in the order they were handed out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.schedule import heaviest_first

ROOT = Path(__file__).resolve().parents[1]

# Many quick tests, few slow ones: xdist's own order (most tests first) is the reverse of the seconds'.
FILES = {"test_many.py": 6, "test_some.py": 3, "test_few.py": 1}
SECONDS = {"test_many.py": 0.5, "test_some.py": 4.0, "test_few.py": 30.0}


def test_the_longest_files_come_first_and_unknown_ones_before_them() -> None:
    seconds = {"a.py": 1.0, "b.py": 9.0, "c.py": 3.0}
    assert heaviest_first(["a.py", "b.py", "new.py", "c.py", "other.py"], seconds) == \
        ["new.py", "other.py", "b.py", "c.py", "a.py"]
    assert heaviest_first(["x.py", "y.py"], {}) == ["x.py", "y.py"]  # nothing stored: as given


def _suite(folder: Path) -> Path:
    log = folder / "ran.log"
    for name, count in FILES.items():
        tests = "\n".join(f"def test_{i}():\n    open({str(log)!r}, 'a').write({name!r} + '\\n')\n"
                          for i in range(count))
        (folder / name).write_text(tests)
    return log


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "pytest", "-p", "tests.schedule", "-n", "1", "--dist", "loadfile",
               "-p", "no:cacheprovider", "-q", *args]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def _order(log: Path) -> list[str]:
    return list(dict.fromkeys(log.read_text().split()))


def test_a_run_hands_out_the_files_longest_first_and_stores_their_seconds(tmp_path: Path) -> None:
    log = _suite(tmp_path)
    stored = tmp_path / "durations.json"
    stored.write_text(json.dumps(SECONDS))
    done = _pytest(tmp_path, "--store-durations", "--durations-path", str(stored))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _order(log) == ["test_few.py", "test_some.py", "test_many.py"]
    seconds = json.loads(stored.read_text())  # this run's own, in place of the stored ones
    assert sorted(seconds) == sorted(FILES) and all(0 <= value < 30 for value in seconds.values())
