"""The real Claude Code CLI through the gateway (issue 25, item 0): the CLI a real process, the
gateway and the upstream on 127.0.0.1, over real HTTP.

Claude Code (``-p``, the npm package, pinned) reads 15 files, one ``Read`` call per turn, as a
scripted Anthropic upstream (``fake_anthropic``) asks, on a model with a 32k-token window: the files
hold more than the window, so the gateway must compress as the history overflows, and the loop
must still complete with the task, every tool call and its result, and the newest result whole
reaching the last step.

The CLI comes from ``CLAUDE_CODE_BIN`` when set, else it is installed once with npm into
``.venv/claude-code`` (its native binary is put in place by the package's own install script). The
test skips only when node or npm is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import UPSTREAM_KEY, ServerThread
from fake_anthropic import FINAL_TEXT, READ_ID, FakeAnthropic
from npm_clis import installed, write_project

from gateway import create_app
from gateway.config import parse_config

VERSION = "2.1.331"
FILES = 15
WINDOW = 32_768
TASK = "Read each of the files the project holds and report the code written at the top of each."


@pytest.fixture(scope="module")
def claude() -> Path:
    return installed("@anthropic-ai/claude-code", VERSION, "claude", env="CLAUDE_CODE_BIN",
                     home="claude-code")


@pytest.fixture
def project(tmp_path: Path) -> list[str]:
    """15 files of about 3,000 tokens each, a code on each one's first line."""
    return write_project(tmp_path, FILES)


@pytest.fixture
def stack(project: list[str]) -> Iterator[tuple[FakeAnthropic, str]]:
    upstream = FakeAnthropic(files=project).start()
    entry = {"model_name": "claude-32k", "model_info": {"max_input_tokens": WINDOW},
             "litellm_params": {"model": "anthropic/claude-sonnet-4-5", "api_base": upstream.url,
                                "api_key": UPSTREAM_KEY}}
    config = {"model_list": [entry], "mixpr_settings": {"router": "heuristic"},
              "general_settings": {"compression_workers": 1}}
    gateway = ServerThread(create_app(parse_config(config))).start()
    yield upstream, gateway.url
    gateway.stop()
    upstream.stop()


def test_claude_code_reads_15_files_through_a_32k_model(
    claude: Path, project: list[str], stack: tuple[FakeAnthropic, str], tmp_path: Path
) -> None:
    upstream, url = stack
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path / "home"), "ANTHROPIC_BASE_URL": url,
           "ANTHROPIC_API_KEY": "sk-anything", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096",
           "ANTHROPIC_SMALL_FAST_MODEL": "claude-32k", "ANTHROPIC_DEFAULT_HAIKU_MODEL": "claude-32k",
           "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    done = subprocess.run([str(claude), "-p", TASK, "--model", "claude-32k", "--tools", "Read",
                           "--allowedTools", "Read"], cwd=Path(project[0]).parent, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert FINAL_TEXT in done.stdout
    loop = upstream.loop_requests()
    assert len(loop) == FILES + 1
    last = loop[-1].json
    # The task and every call with its result reach the last step, in Anthropic's own blocks.
    assert TASK in json.dumps(last["messages"][0])
    blocks = [b for m in last["messages"] if isinstance(m["content"], list) for b in m["content"]]
    assert [b["id"] for b in blocks if b["type"] == "tool_use"] == [f"{READ_ID}{n}" for n in range(FILES)]
    assert [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"] == \
        [f"{READ_ID}{n}" for n in range(FILES)]
    # Claude Code merges the steps; the gateway compresses them step by step: the newest result whole.
    newest = next(b for b in reversed(blocks) if b["type"] == "tool_result")
    assert "CODE-14-ox" in json.dumps(newest["content"])
    # What Claude Code sends besides its messages is relayed as it sent it.
    assert last["thinking"] and last["context_management"] and "anthropic-beta" in loop[-1].headers
    # The files hold more than the window: the gateway compressed, and the history fits again.
    sizes = sum(Path(p).stat().st_size for p in project)
    results = sum(len(json.dumps(b["content"])) for b in blocks if b["type"] == "tool_result")
    assert sizes / 4 > WINDOW and results < 0.8 * sizes and len(loop[-1].raw_body) / 4 < WINDOW
    metrics = httpx.get(url + "/metrics").text
    assert 'action="compressed"' in metrics
