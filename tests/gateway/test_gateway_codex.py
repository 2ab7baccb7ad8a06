"""The real Codex CLI through the gateway's Responses API (issue 25, item 0): a guard of what works.

Codex (``exec``, the npm package, pinned) ``cat``s 15 files with its ``exec_command`` tool, one per
turn, as a scripted chat upstream (``fake_chat_agent``) asks, on a model with a 32k-token window:
the files hold more than the window, so the gateway compresses mid-loop, and the loop must still
complete with the task and every call reaching the last step.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread
from fake_chat_agent import CALL_ID, FINAL, FakeChatAgent
from npm_clis import installed, write_project

from gateway import create_app
from gateway.config import parse_config

VERSION = "0.169.0"
FILES = 15
WINDOW = 32_768
TASK = "Read each of the files the project holds and report the code written at the top of each."


@pytest.fixture(scope="module")
def codex() -> Path:
    return installed("@openai/codex", VERSION, "codex", env="CODEX_BIN", home="codex")


@pytest.fixture
def project(tmp_path: Path) -> list[str]:
    """15 files of about 3,000 tokens each, a code on each one's first line."""
    return write_project(tmp_path, FILES)


@pytest.fixture
def stack(project: list[str]) -> Iterator[tuple[FakeChatAgent, str]]:
    upstream = FakeChatAgent(project).start()
    entry = {"model_name": "chat-32k", "model_info": {"max_input_tokens": WINDOW},
             "litellm_params": {"model": "openai/reader", "api_base": upstream.url, "api_key": "sk-upstream"}}
    config = {"model_list": [entry], "mixpr_settings": {"router": "heuristic"},
              "general_settings": {"master_key": MASTER_KEY, "compression_workers": 1}}
    gateway = ServerThread(create_app(parse_config(config))).start()
    yield upstream, gateway.url
    gateway.stop()
    upstream.stop()


def test_codex_reads_15_files_through_a_32k_model(
    codex: Path, project: list[str], stack: tuple[FakeChatAgent, str], tmp_path: Path
) -> None:
    upstream, url = stack
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "chat-32k"\nmodel_provider = "mixpr"\n[model_providers.mixpr]\nname = "mixpr"\n'
        f'base_url = "{url}/v1"\nenv_key = "MIXPR_KEY"\nwire_api = "responses"\n')
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "CODEX_HOME": str(home),
           "MIXPR_KEY": MASTER_KEY}
    done = subprocess.run([str(codex), "exec", "--skip-git-repo-check",
                           "--dangerously-bypass-approvals-and-sandbox", TASK],
                          cwd=Path(project[0]).parent, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert FINAL in done.stdout
    loop = upstream.loop_requests()
    assert len(loop) == FILES + 1
    last = loop[-1]["messages"]
    assert any(TASK in json.dumps(m) for m in last if m["role"] == "user")
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == [f"{CALL_ID}{n}" for n in range(FILES)]
    sizes = sum(Path(p).stat().st_size for p in project)
    results = sum(len(json.dumps(m["content"])) for m in last if m["role"] == "tool")
    assert sizes / 4 > WINDOW and results < 0.8 * sizes and len(json.dumps(loop[-1])) / 4 < WINDOW
    assert 'action="compressed"' in httpx.get(url + "/metrics").text
