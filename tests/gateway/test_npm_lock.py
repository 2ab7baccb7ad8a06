"""Two installs of an agent CLI into one folder never run at once (``agent_clients._locked``): the lock is
the folder's, so it holds across pytest-xdist workers and test runs, which ``xdist_group`` marks
under ``--dist loadfile`` did not."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

import pytest
from agent_clients import _locked


def test_a_folder_being_installed_is_locked_to_any_other_install(tmp_path: Path) -> None:
    prefix = tmp_path / "claude-code"
    inside, leave = threading.Event(), threading.Event()

    def install() -> None:
        with _locked(prefix):
            inside.set()
            leave.wait(30)

    worker = threading.Thread(target=install)
    worker.start()
    assert inside.wait(30)
    with open(prefix.with_name(prefix.name + ".lock"), "w") as other:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        leave.set()
        worker.join(30)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the install is done
