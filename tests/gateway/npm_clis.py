"""Agent CLIs from npm for the end-to-end tests, pinned and installed once into ``.venv/<name>``
(the newest release, for the tests that check it still works, into ``.venv/<name>-newest``).

``<ENV>`` (e.g. ``CLAUDE_CODE_BIN``) names an executable to use instead of the pinned one. A test
skips only when node or npm is missing, or, for the newest release, when the registry cannot be
reached; a failed install fails it (with npm's output). Two installs into one folder at once would
break both, so each install holds a lock on its folder (``<folder>.lock``): across pytest-xdist
workers and across test runs alike. (This replaced ``xdist_group`` marks, which ``--dist loadfile``
ignores.)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from corpus import filler

VENV = Path(__file__).resolve().parents[2] / ".venv"
CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.332")  # the newest release when issue 28 was filed
CODEX = ("@openai/codex", "0.169.0")
REGISTRY_TIMEOUT_S = 60


def installed(package: str, version: str, binary: str, *, env: str | None, home: str) -> Path:
    """The executable ``binary`` of ``package@version``: ``$env`` when set, else npm's."""
    given = os.environ.get(env) if env else None
    if given:
        return Path(given)
    _need_npm(package, env)
    prefix = VENV / home
    manifest = prefix / "node_modules" / package / "package.json"
    path = prefix / "node_modules" / ".bin" / binary
    with _locked(prefix):
        if not manifest.exists() or json.loads(manifest.read_text())["version"] != version:
            done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                                   f"{package}@{version}"], capture_output=True, text=True, timeout=600)
            if done.returncode:
                pytest.fail(f"npm install {package}@{version} failed:\n{done.stderr[-2000:]}")
        script = manifest.parent / "install.cjs"
        # Claude Code's native binary is put in place by its install script, which npm may not run.
        if script.exists() and path.resolve().stat().st_size < 1_000_000:
            subprocess.run(["node", str(script)], check=True, capture_output=True, timeout=120)
    return path


@contextlib.contextmanager
def _locked(prefix: Path):
    """``prefix``'s install lock, held until the block ends (released by the OS if the process dies)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.with_name(prefix.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def newest(package: str) -> str:
    """The version npm's ``latest`` tag names now; skips the test when the registry cannot be reached."""
    _need_npm(package, None)
    try:
        done = subprocess.run(["npm", "view", package, "version"], capture_output=True, text=True,
                              timeout=REGISTRY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.skip(f"the npm registry did not answer in {REGISTRY_TIMEOUT_S} s: newest {package} unknown")
    if done.returncode or not done.stdout.strip():
        pytest.skip(f"the npm registry could not be reached: newest {package} unknown ({done.stderr[-300:]})")
    return done.stdout.strip()


def _need_npm(package: str, env: str | None) -> None:
    if not (shutil.which("node") and shutil.which("npm")):
        instead = f" (set {env} to use one)" if env else ""
        pytest.skip(f"node/npm not found: {package} cannot be installed{instead}")


def write_project(folder: Path, files: int) -> list[str]:
    """``files`` text files of about 3,000 tokens each, a code on each one's first line: what the
    agent CLIs are asked to read one by one."""
    paths = []
    for n in range(files):
        path = folder / "project" / f"notes_{n:02d}.txt"
        path.parent.mkdir(exist_ok=True)
        lines = [f"CODE-{n}-{'abcdefghijklmnopqrstuvwxyz'[n]}x"]
        lines += [filler(8, seed=100 * n + k) for k in range(16)]
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    return paths
