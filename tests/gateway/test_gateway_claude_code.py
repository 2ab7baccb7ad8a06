"""The real Claude Code CLI through the gateway (issues 25 and 28): the CLI a real process, the
gateway and the upstream on 127.0.0.1, over real HTTP, a model with a 32k-token window named as
Claude Code needs (``claude-sonnet-4-6``: newest Claude Code checks the name before it sends
anything), and no client-side workaround: Claude Code asks its default ``max_tokens: 32000``, which
the gateway lowers (``gateway.core.reply``).

- Claude Code reads 15 long files, one ``Read`` call per turn, as a scripted Anthropic upstream
  (``fake_anthropic``) asks: the files hold more than the window, so the gateway must compress as
  the history overflows, and the loop must still complete with the task, every tool call and its
  result, and the newest result whole reaching the last step.
- The 15-file task of issue 28 (``codeword_task``), pinned and with the newest release: the
  codeword of the file the task names must reach the last request.

The CLI comes from ``CLAUDE_CODE_BIN`` when set, else it is installed once with npm into
``.venv/claude-code`` (``npm_clis``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import codeword_task
import httpx
import pytest
from conftest import UPSTREAM_KEY, ServerThread
from fake_anthropic import FINAL_TEXT, READ_ID, FakeAnthropic, Seen
from npm_clis import CLAUDE_CODE, installed, newest, write_project

from gateway import create_app
from gateway.config import parse_config

FILES = 15
WINDOW = 32_768
MODEL = "claude-sonnet-4-6"
ASKED_REPLY = 32_000  # Claude Code's max_tokens for Claude models
# What the gateway lowers it to (gateway.core.reply): a quarter of the window, or
# completion_reserve_tokens when that leaves the history no room beside Claude Code's own prompt.
LOWERED_REPLIES = {WINDOW // 4, 1024}
TASK = "Read each of the files the project holds and report the code written at the top of each."


@pytest.fixture(scope="module")
def claude() -> Path:
    return installed(*CLAUDE_CODE, "claude", env="CLAUDE_CODE_BIN", home="claude-code")


@pytest.fixture(scope="module")
def claude_newest() -> Path:
    package = CLAUDE_CODE[0]
    return installed(package, newest(package), "claude", env=None, home="claude-code-newest")


@contextmanager
def _stack(files: list[str]) -> Iterator[tuple[FakeAnthropic, str]]:
    """The scripted upstream and the gateway in front of it (its URL), for as long as the block runs."""
    upstream = FakeAnthropic(files=files).start()
    entry = {"model_name": MODEL, "model_info": {"max_input_tokens": WINDOW},
             "litellm_params": {"model": f"anthropic/{MODEL}", "api_base": upstream.url,
                                "api_key": UPSTREAM_KEY}}
    config = {"model_list": [entry], "mixpr_settings": {"router": "heuristic"},
              "general_settings": {"compression_workers": 1}}
    gateway = ServerThread(create_app(parse_config(config))).start()
    try:
        yield upstream, gateway.url
    finally:
        gateway.stop()
        upstream.stop()


def _run(binary: Path, prompt: str, url: str, cwd: Path, home: Path,
         *tools: str) -> subprocess.CompletedProcess[str]:
    """``claude -p prompt``, as a user runs it against the gateway (telemetry and updates off)."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "ANTHROPIC_BASE_URL": url,
           "ANTHROPIC_API_KEY": "sk-anything", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    limits = ["--tools", ",".join(tools), "--allowedTools", ",".join(tools)] if tools else []
    return subprocess.run([str(binary), "-p", prompt, "--model", MODEL, *limits], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


def _blocks(request: Seen) -> list[dict]:
    return [b for m in request.json["messages"] if isinstance(m["content"], list) for b in m["content"]]


def _assert_every_read_answered(request: Seen) -> None:
    """All 15 ``Read`` calls and their results reach the request, in Anthropic's own blocks, in order."""
    blocks = _blocks(request)
    ids = [f"{READ_ID}{n}" for n in range(FILES)]
    assert [b["id"] for b in blocks if b["type"] == "tool_use"] == ids
    assert [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"] == ids


def test_claude_code_reads_15_files_through_a_32k_model(claude: Path, tmp_path: Path) -> None:
    project = write_project(tmp_path, FILES)
    with _stack(project) as (upstream, url):
        done = _run(claude, TASK, url, Path(project[0]).parent, tmp_path / "home", "Read")
        metrics = httpx.get(url + "/metrics").text
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert FINAL_TEXT in done.stdout
    loop = upstream.loop_requests()
    assert len(loop) == FILES + 1
    last = loop[-1].json
    assert TASK in json.dumps(last["messages"][0])
    _assert_every_read_answered(loop[-1])
    # Claude Code merges the steps; the gateway compresses them step by step: the newest result whole.
    newest_result = next(b for b in reversed(_blocks(loop[-1])) if b["type"] == "tool_result")
    assert "CODE-14-ox" in json.dumps(newest_result["content"])
    # What Claude Code sends besides its messages is relayed as it sent it; max_tokens lowered.
    assert last["thinking"] and last["context_management"] and "anthropic-beta" in loop[-1].headers
    assert {r.json["max_tokens"] for r in loop} <= LOWERED_REPLIES
    # The files hold more than the window: the gateway compressed, and the history fits again.
    sizes = sum(Path(p).stat().st_size for p in project)
    results = sum(len(json.dumps(b["content"])) for b in _blocks(loop[-1]) if b["type"] == "tool_result")
    assert sizes / 4 > WINDOW and results < 0.8 * sizes and len(loop[-1].raw_body) / 4 < WINDOW
    assert 'action="compressed"' in metrics


# Issue 28 is not done for Claude Code: its own system prompt and tools take ~21k of the 32k window,
# and the task names f0.txt and f14.txt as well as f3.txt, so the task reset keeps f3's codeword in
# some runs and f0's in others (Claude Code's reminders differ from run to run). Not strict: when it
# passes it says so (XPASS) instead of failing the suite.
@pytest.mark.xfail(reason="issue 28 blocked: f3's codeword survives Claude Code's resets only sometimes",
                   strict=False)
@pytest.mark.parametrize("release", ["pinned", "newest"])
def test_claude_code_keeps_the_codeword_the_task_asks_for(release: str, request: pytest.FixtureRequest,
                                                          tmp_path: Path) -> None:
    """Issue 28's 15-file task, Claude Code's own defaults (every tool, ``max_tokens: 32000``): the
    loop completes, and f3's codeword is in the last request the upstream receives."""
    binary = request.getfixturevalue("claude" if release == "pinned" else "claude_newest")
    folder = tmp_path / "task"
    folder.mkdir()
    with _stack(codeword_task.write(folder)) as (upstream, url):
        done = _run(binary, codeword_task.TASK, url, folder, tmp_path / "home")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    loop = upstream.loop_requests()
    assert len(loop) == FILES + 1
    assert {r.json["max_tokens"] for r in loop} <= LOWERED_REPLIES
    last = loop[-1]
    _assert_every_read_answered(last)
    sent = json.dumps(last.json["messages"])
    assert codeword_task.TASK in sent
    kept = ", ".join(f"f{n}" for n in range(FILES) if codeword_task.codeword(n) in sent) or "none"
    assert codeword_task.codeword(codeword_task.ASKED) in sent, \
        f"f{codeword_task.ASKED}.txt's codeword is not in the last request; codewords kept: {kept}"
    assert codeword_task.codeword(codeword_task.ASKED) in done.stdout
