"""The real OpenCode CLI (npm ``opencode-ai``) through the gateway's chat completions (issue 36), over
real HTTP on 127.0.0.1, a model with a 32k-token window, configured as a user does: an
``@ai-sdk/openai-compatible`` provider in the project's ``opencode.json``, and ``PWD`` set to the
project's folder (OpenCode takes its project folder from ``PWD``, not from the process's working
directory: started by another program, it would otherwise work in that program's folder).

Issue 28's 15-file task (``codeword_task``): OpenCode ``cat``s the files with its ``bash`` tool, one per
turn, as the scripted chat upstream (``fake_chat_agent``) asks; the loop completes with every call and
its result, the gateway answers no 4xx or 5xx, and the codeword of the file the task names reaches the
last request.

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
    OPENCODE,
    WINDOW,
    Run,
    assert_every_chat_call_answered,
    assert_run_kept_codeword,
    codeword_run,
)
from conftest import MASTER_KEY
from fake_chat_agent import CALL_ID, FINAL

MODEL = "chat-32k"
REPLY = 4096  # the output limit opencode.json gives the model: OpenCode asks this max_tokens


def config(url: str) -> dict:
    """``opencode.json``: the gateway as an OpenAI-compatible provider, its key read from ``MIXPR_KEY``."""
    model = {"name": MODEL, "limit": {"context": WINDOW, "output": REPLY}}
    provider = {"npm": "@ai-sdk/openai-compatible", "name": "MixPR Gateway",
                "options": {"baseURL": f"{url}/v1", "apiKey": "{env:MIXPR_KEY}"},
                "models": {MODEL: model}}
    return {"$schema": "https://opencode.ai/config.json", "provider": {"mixpr": provider},
            "model": f"mixpr/{MODEL}"}


def _run(prompt: str, url: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``opencode run prompt`` in ``cwd`` (``PWD`` too), updates, sharing and the models list off."""
    (cwd / "opencode.json").write_text(json.dumps(config(url), indent=2))
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "PWD": str(cwd), "MIXPR_KEY": MASTER_KEY,
           "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1",
           "OPENCODE_DISABLE_MODELS_FETCH": "1"}
    return subprocess.run([str(OPENCODE.executable()), "run", prompt], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)


@pytest.fixture(scope="module")
def codeword(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Issue 28's 15-file task, run once for the tests below."""
    return codeword_run(tmp_path_factory, OPENCODE, MODEL, _run)


def test_opencode_completes_the_codeword_task(codeword: Run) -> None:
    """Exit 0, no gateway 4xx/5xx, every step reached: the 15 calls and their results, and the task,
    in the last request; the final answer printed."""
    codeword.ended_well()
    assert FINAL in codeword.done.stdout
    assert len(codeword.loop) == FILES + 1
    last = codeword.loop[-1]["messages"]
    assert_every_chat_call_answered(last, CALL_ID)
    assert codeword_task.TASK in json.dumps(last)
    assert {body["max_tokens"] for body in codeword.loop} == {REPLY}


def test_opencode_keeps_the_codeword_the_task_asks_for(codeword: Run) -> None:
    assert_run_kept_codeword(codeword)
