"""The real Codex CLI through the gateway's Responses API (issues 25 and 28), over real HTTP on
127.0.0.1, a model with a 32k-token window, and no client-side workaround.

- Codex (``exec``) ``cat``s 15 long files with its shell tool, one per turn, as a scripted chat
  upstream (``fake_chat_agent``) asks: the files hold more than the window, so the gateway compresses
  mid-loop, and the loop must still complete with the task and every call reaching the last step.
- The 15-file task of issue 28 (``codeword_task``), pinned and with the newest release: the
  codeword of the file the task names must reach the last request.

The CLI comes from ``CODEX_BIN`` when set, else it is installed once with npm into ``.venv/codex``
(``npm_clis``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import codeword_task
import httpx
import pytest
from conftest import MASTER_KEY, ServerThread
from fake_chat_agent import CALL_ID, FINAL, FakeChatAgent
from npm_clis import CODEX, installed, newest, write_project

from gateway import create_app
from gateway.config import parse_config

FILES = 15
WINDOW = 32_768
MODEL = "chat-32k"
TASK = "Read each of the files the project holds and report the code written at the top of each."


@pytest.fixture(scope="module")
def codex() -> Path:
    return installed(*CODEX, "codex", env="CODEX_BIN", home="codex")


@pytest.fixture(scope="module")
def codex_newest() -> Path:
    package = CODEX[0]
    return installed(package, newest(package), "codex", env=None, home="codex-newest")


@contextmanager
def _stack(files: list[str]) -> Iterator[tuple[FakeChatAgent, str]]:
    """The scripted upstream and the gateway in front of it (its URL), for as long as the block runs."""
    upstream = FakeChatAgent(files).start()
    entry = {"model_name": MODEL, "model_info": {"max_input_tokens": WINDOW},
             "litellm_params": {"model": "openai/reader", "api_base": upstream.url, "api_key": "sk-upstream"}}
    config = {"model_list": [entry], "mixpr_settings": {"router": "heuristic"},
              "general_settings": {"master_key": MASTER_KEY, "compression_workers": 1}}
    gateway = ServerThread(create_app(parse_config(config))).start()
    try:
        yield upstream, gateway.url
    finally:
        gateway.stop()
        upstream.stop()


def _run(binary: Path, prompt: str, url: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``codex exec prompt`` with the gateway as its model provider, as a user configures it."""
    codex_home = home / "codex-home"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "mixpr"\n[model_providers.mixpr]\nname = "mixpr"\n'
        f'base_url = "{url}/v1"\nenv_key = "MIXPR_KEY"\nwire_api = "responses"\n')
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "CODEX_HOME": str(codex_home),
           "MIXPR_KEY": MASTER_KEY}
    return subprocess.run([str(binary), "exec", "--skip-git-repo-check",
                           "--dangerously-bypass-approvals-and-sandbox", prompt],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _assert_every_call_answered(messages: list[dict[str, Any]]) -> None:
    """All 15 shell calls and their outputs reach the request, in order."""
    ids = [f"{CALL_ID}{n}" for n in range(FILES)]
    calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    assert calls == ids
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ids


def test_codex_reads_15_files_through_a_32k_model(codex: Path, tmp_path: Path) -> None:
    project = write_project(tmp_path, FILES)
    with _stack(project) as (upstream, url):
        done = _run(codex, TASK, url, Path(project[0]).parent, tmp_path)
        metrics = httpx.get(url + "/metrics").text
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert FINAL in done.stdout
    loop = upstream.loop_requests()
    assert len(loop) == FILES + 1
    last = loop[-1]["messages"]
    assert any(TASK in json.dumps(m) for m in last if m["role"] == "user")
    _assert_every_call_answered(last)
    sizes = sum(Path(p).stat().st_size for p in project)
    results = sum(len(json.dumps(m["content"])) for m in last if m["role"] == "tool")
    assert sizes / 4 > WINDOW and results < 0.8 * sizes and len(json.dumps(loop[-1])) / 4 < WINDOW
    assert 'action="compressed"' in metrics


@pytest.mark.parametrize("release", ["pinned", "newest"])
def test_codex_keeps_the_codeword_the_task_asks_for(release: str, request: pytest.FixtureRequest,
                                                    tmp_path: Path) -> None:
    """Issue 28's 15-file task: the loop completes, and f3's codeword is in the last request the
    upstream receives."""
    binary = request.getfixturevalue("codex" if release == "pinned" else "codex_newest")
    folder = tmp_path / "task"
    folder.mkdir()
    with _stack(codeword_task.write(folder)) as (upstream, url):
        done = _run(binary, codeword_task.TASK, url, folder, tmp_path)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    loop = upstream.loop_requests()
    assert len(loop) == FILES + 1
    last = loop[-1]["messages"]
    _assert_every_call_answered(last)
    sent = json.dumps(last)
    assert codeword_task.TASK in sent
    kept = ", ".join(f"f{n}" for n in range(FILES) if codeword_task.codeword(n) in sent) or "none"
    assert codeword_task.codeword(codeword_task.ASKED) in sent, \
        f"f{codeword_task.ASKED}.txt's codeword is not in the last request; codewords kept: {kept}"
    assert codeword_task.codeword(codeword_task.ASKED) in done.stdout
