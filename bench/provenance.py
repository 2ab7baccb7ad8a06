"""Which library code produced a result: the repo commit plus whether mixpr/ had uncommitted edits."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def library_version() -> dict[str, str | bool]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "mixpr_dirty": bool(git("status", "--porcelain", "mixpr")),
    }
