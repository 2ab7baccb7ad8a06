"""The real Codex CLI through the gateway's Responses API (issues 25 and 28), over real HTTP on
127.0.0.1, a model with a 32k-token window, and no client-side workaround.

- Codex (``exec``) ``cat``s 15 long files with its shell tool, one per turn, as a scripted chat
  upstream (``fake_chat_agent``) asks: the files hold more than the window, so the gateway compresses
  mid-loop, and the loop must still complete with the task and every call reaching the last step.
- The 15-file task of issue 28 (``codeword_task``): the loop completes, and the codeword of the file
  the task names reaches the last request.

The release (pinned, or newest with ``make clients``) and its install: ``agent_clients``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import codeword_task
import pytest
from agent_clients import (
    CODEX,
    FILES,
    WINDOW,
    Run,
    assert_every_chat_call_answered,
    assert_run_kept_codeword,
    chat_task,
    codeword_run,
    codex_exec,
    write_project,
)
from conftest import MASTER_KEY
from fake_chat_agent import CALL_ID, FINAL

MODEL = "chat-32k"
TASK = "Read each of the files the project holds and report the code written at the top of each."


def _run(prompt: str, url: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return codex_exec(MODEL, prompt, url, cwd, home)


@pytest.fixture(scope="module")
def codeword(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Issue 28's 15-file task, run once for the tests below."""
    return codeword_run(tmp_path_factory, CODEX, MODEL, _run)


def test_codex_reads_15_files_through_a_32k_model(tmp_path: Path) -> None:
    project = write_project(tmp_path, FILES)
    folder = Path(project[0]).parent
    run = chat_task(project, MODEL, lambda url: _run(TASK, url, folder, tmp_path), MASTER_KEY)
    run.ended_well()
    assert FINAL in run.done.stdout
    assert len(run.loop) == FILES + 1
    last = run.loop[-1]["messages"]
    assert any(TASK in json.dumps(m) for m in last if m["role"] == "user")
    assert_every_chat_call_answered(last, CALL_ID)
    sizes = sum(Path(p).stat().st_size for p in project)
    results = sum(len(json.dumps(m["content"])) for m in last if m["role"] == "tool")
    assert sizes / 4 > WINDOW and results < 0.8 * sizes and len(json.dumps(run.loop[-1])) / 4 < WINDOW
    assert 'action="compressed"' in run.metrics


def test_codex_completes_the_codeword_task(codeword: Run) -> None:
    """Every step reached: the 15 calls and their results, and the task, in the last request."""
    codeword.ended_well()
    assert len(codeword.loop) == FILES + 1
    last = codeword.loop[-1]["messages"]
    assert_every_chat_call_answered(last, CALL_ID)
    assert codeword_task.TASK in json.dumps(last)


def test_codex_keeps_the_codeword_the_task_asks_for(codeword: Run) -> None:
    assert_run_kept_codeword(codeword)
