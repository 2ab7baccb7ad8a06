"""The declared layering (``[tool.importlinter]`` in pyproject.toml) holds; a wrong-way import breaks it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "NO_COLOR": "1"}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=120)


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree)
    for package in ("gateway", "mixpr"):
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_way_import_is_caught(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    with (tree / "gateway" / "run" / "offload.py").open("a") as f:
        f.write("\nimport gateway.api.common  # noqa: E402  the run layer reaching up to an API adapter\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "gateway.run.offload -> gateway.api.common" in result.stdout


def test_mixpr_importing_the_gateway_is_caught(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    with (tree / "mixpr" / "pagerank.py").open("a") as f:
        f.write("\nimport gateway.config  # noqa: E402\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "mixpr.pagerank -> gateway.config" in result.stdout


def test_an_import_circle_inside_a_layer_is_caught(tmp_path: Path) -> None:
    """The layers allow any import within one layer; the acyclic contract still refuses a circle there."""
    tree = _copy(tmp_path)
    with (tree / "gateway" / "conversation" / "sent.py").open("a") as f:
        f.write("\nimport gateway.conversation.report  # noqa: E402  report imports sent: a circle\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "No cycles are allowed in gateway.conversation" in result.stdout
    assert ".sent -> .report" in result.stdout or ".report -> .sent" in result.stdout
