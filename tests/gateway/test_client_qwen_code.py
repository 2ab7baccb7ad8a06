"""The real Qwen Code CLI (npm ``@qwen-code/qwen-code``) through the gateway's chat completions
(issue 36), over real HTTP on 127.0.0.1, a model with a 32k-token window, configured as a user does:
``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``OPENAI_MODEL``, headless (``qwen --yolo PROMPT``).

Issue 28's 15-file task (``codeword_task``): Qwen Code ``cat``s the files with its
``run_shell_command`` tool, one per turn, as the scripted chat upstream (``fake_chat_agent``) asks;
its own system prompt and tools take ~19k tokens of the 32k window, so the gateway compresses from the
middle of the loop on. The loop completes with every call and its result, the gateway answers no 4xx
or 5xx, and the codeword of the file the task names reaches the last request.

The release (pinned, or newest with ``make clients``) and its install: ``agent_clients``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import codeword_task
import pytest
from agent_clients import (
    CLIENT_TIMEOUT_S,
    FILES,
    QWEN_CODE,
    WINDOW,
    Run,
    assert_every_chat_call_answered,
    assert_run_kept_codeword,
    codeword_run,
)
from conftest import MASTER_KEY
from fake_chat_agent import CALL_ID, FINAL

MODEL = "chat-32k"


def _run(prompt: str, url: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``qwen --yolo prompt`` in ``cwd`` with the gateway as its OpenAI endpoint, usage statistics off."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "OPENAI_BASE_URL": f"{url}/v1",
           "OPENAI_API_KEY": MASTER_KEY, "OPENAI_MODEL": MODEL, "QWEN_USAGE_STATISTICS_ENABLED": "0",
           "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}
    return subprocess.run([str(QWEN_CODE.executable()), "--yolo", prompt], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)


@pytest.fixture(scope="module")
def codeword(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Issue 28's 15-file task, run once for the tests below."""
    return codeword_run(tmp_path_factory, QWEN_CODE, MODEL, _run)


def test_qwen_code_completes_the_codeword_task(codeword: Run) -> None:
    """Exit 0, no gateway 4xx/5xx, every step reached: the 15 calls and their results, and the task,
    in the last request (which fits the window); the final answer printed."""
    codeword.ended_well()
    assert FINAL in codeword.done.stdout
    assert len(codeword.loop) == FILES + 1
    last = codeword.loop[-1]["messages"]
    assert_every_chat_call_answered(last, CALL_ID)
    assert codeword_task.TASK in json.dumps(last)
    assert len(json.dumps(codeword.loop[-1])) / 4 < WINDOW
    assert 'action="compressed"' in codeword.metrics


def _client_lost_the_asked_file(run: Run) -> bool:
    """Whether Qwen Code itself sent the asked file's ``cat`` as ``Output: (empty)``: its shell tool
    does that now and then (f6 and f14 in one run, none in the next; most likely f3 in the one CI run
    of ~60 that lost its codeword, which printed no trail), and then there is no codeword to keep.
    The result as the client sent it: the first request that holds it goes through below the
    trigger, as written."""
    call = f"{CALL_ID}{codeword_task.ASKED}"
    for body in run.loop:
        for message in body["messages"]:
            if message.get("role") == "tool" and message.get("tool_call_id") == call:
                return "Output: (empty)" in json.dumps(message.get("content"))
    return False


def test_qwen_code_keeps_the_codeword_the_task_asks_for(codeword: Run) -> None:
    if _client_lost_the_asked_file(codeword):
        pytest.skip(f"Qwen Code's shell tool returned an empty output for f{codeword_task.ASKED}.txt")
    assert_run_kept_codeword(codeword)
