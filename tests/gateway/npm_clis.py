"""Agent CLIs from npm for the end-to-end tests, pinned and installed once into ``.venv/<name>``.

``<ENV>`` (e.g. ``CLAUDE_CODE_BIN``) names an executable to use instead. A test skips only when
node or npm is missing; a failed install fails it (with npm's output).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from corpus import filler

VENV = Path(__file__).resolve().parents[2] / ".venv"


def installed(package: str, version: str, binary: str, *, env: str, home: str) -> Path:
    """The executable ``binary`` of ``package@version``: ``$env`` when set, else npm's."""
    given = os.environ.get(env)
    if given:
        return Path(given)
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip(f"node/npm not found: {package} cannot be installed (set {env} to use one)")
    prefix = VENV / home
    manifest = prefix / "node_modules" / package / "package.json"
    if not manifest.exists() or json.loads(manifest.read_text())["version"] != version:
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                               f"{package}@{version}"], capture_output=True, text=True, timeout=600)
        if done.returncode:
            pytest.fail(f"npm install {package}@{version} failed:\n{done.stderr[-2000:]}")
    script = manifest.parent / "install.cjs"
    path = prefix / "node_modules" / ".bin" / binary
    # Claude Code's native binary is put in place by its install script, which npm may not run.
    if script.exists() and path.resolve().stat().st_size < 1_000_000:
        subprocess.run(["node", str(script)], check=True, capture_output=True, timeout=120)
    return path


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
