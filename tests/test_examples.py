"""The library's examples in the README and docs run as written.

A Python block that follows the line ``<!-- example: runs as a test (tests/test_examples.py) -->`` is
run in a fresh interpreter from the repository folder; it must exit 0 (its own asserts check what it
shows). Every Python block that imports ``mixpr`` in these pages must be marked so, so that a new
example cannot escape the test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/library.md", "docs/reference.md"]
MARK = "<!-- example: runs as a test (tests/test_examples.py) -->"
BLOCK = re.compile(r"^(?P<mark>" + re.escape(MARK) + r"\n)?```python\n(?P<code>.*?)^```",
                   re.MULTILINE | re.DOTALL)
IMPORTS = re.compile(r"^\s*(import mixpr|from mixpr)", re.MULTILINE)


def blocks(page: str) -> list[tuple[bool, str]]:
    return [(bool(m["mark"]), m["code"]) for m in BLOCK.finditer((ROOT / page).read_text(encoding="utf-8"))]


EXAMPLES = [pytest.param(code, id=f"{page}#{i}") for page in PAGES
            for i, (marked, code) in enumerate(blocks(page)) if marked]  # fmt: skip


def test_every_mixpr_example_is_run():
    unmarked = [(page, code[:60]) for page in PAGES for marked, code in blocks(page)
                if not marked and IMPORTS.search(code)]  # fmt: skip
    assert not unmarked
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("code", EXAMPLES)
def test_example_runs(code):
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
