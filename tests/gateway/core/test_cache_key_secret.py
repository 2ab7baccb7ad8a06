"""The MAC key of ``prompt_cache_key`` (``gateway.core.cache_key.secret``): never a public constant.

With ``deployment_secret`` or ``master_key`` it is derived from them (every replica of the config has
the same); with neither, it is this install's own, random, kept in a file under the state dir, so a
restart keeps it and replicas that share the file share it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path

import pytest

from gateway.core import cache_key

PUBLIC = hashlib.blake2b(b"mixpr prompt_cache_key\0", digest_size=32).digest()  # anyone can compute it


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MIXPR_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_without_a_master_key_the_secret_is_this_installs_own(state: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    first = cache_key.secret(None)
    assert first != PUBLIC and len(first) == 32
    assert cache_key.secret(None) == first  # a restart keeps it: the same file
    [kept] = list(state.iterdir())
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    monkeypatch.setenv("MIXPR_STATE_DIR", str(tmp_path / "another-install"))
    assert cache_key.secret(None) not in (first, PUBLIC)


def test_the_state_dir_defaults_to_the_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIXPR_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert cache_key.secret(None) != PUBLIC
    assert (tmp_path / "xdg" / "mixpr-gateway").is_dir()


def test_instances_starting_at_once_agree(state: Path) -> None:
    found: list[bytes] = []
    threads = [threading.Thread(target=lambda: found.append(cache_key.secret(None))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(found)) == 1 and len(os.listdir(state)) == 1


def test_a_configured_secret_wins_and_replicas_of_one_config_agree(state: Path) -> None:
    by_master = cache_key.secret("sk-master")
    by_deployment = cache_key.secret("sk-master", "the deployment's secret")
    assert by_deployment == cache_key.secret(None, "the deployment's secret") != by_master
    assert by_master == cache_key.secret("sk-master")
    assert not state.exists()  # nothing written when the config names a secret
    assert cache_key.secret(None) not in (by_master, by_deployment)


def test_an_unwritable_state_dir_still_gives_a_private_secret(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("MIXPR_STATE_DIR", str(blocker / "state"))  # under a file: cannot be created
    assert cache_key.secret(None) not in (PUBLIC, b"")
