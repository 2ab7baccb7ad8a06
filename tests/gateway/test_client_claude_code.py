"""The real Claude Code CLI through the gateway (issues 25 and 28): the CLI a real process, the
gateway and the upstream on 127.0.0.1, over real HTTP, a model with a 32k-token window named as
Claude Code needs (``claude-sonnet-4-6``: newest Claude Code checks the name before it sends
anything), and no client-side workaround: Claude Code asks its default ``max_tokens: 32000``, which
the gateway lowers (``gateway.core.reply``).

- Claude Code reads 15 long files, one ``Read`` call per turn, as a scripted Anthropic upstream
  (``fake_anthropic``) asks: the files hold more than the window, so the gateway must compress as
  the history overflows, and the loop must still complete with the task, every tool call and its
  result, and the newest result whole reaching the last step.
- The 15-file task of issue 28 (``codeword_task``), Claude Code's own defaults: the loop completes
  with every read paired with its result and ``max_tokens`` lowered; and (a test of its own, expected
  to fail for now: issue 34) the codeword of the file the task names reaches the last request.

The release (pinned, or newest with ``make clients``) and its install: ``agent_clients``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import codeword_task
import pytest
from agent_clients import (
    CLAUDE_CODE,
    CLIENT_TIMEOUT_S,
    FILES,
    WINDOW,
    Run,
    assert_codeword_kept,
    gateway,
    write_project,
)
from conftest import UPSTREAM_KEY
from fake_anthropic import FINAL_TEXT, READ_ID, FakeAnthropic, Seen

MODEL = "claude-sonnet-4-6"
ASKED_REPLY = 32_000  # Claude Code's max_tokens for Claude models
# What the gateway lowers it to (gateway.core.reply): a quarter of the window, or
# completion_reserve_tokens when that leaves the history no room beside Claude Code's own prompt.
LOWERED_REPLIES = {WINDOW // 4, 1024}
TASK = "Read each of the files the project holds and report the code written at the top of each."


@contextmanager
def _stack(files: list[str]) -> Iterator[tuple[FakeAnthropic, str]]:
    """The scripted upstream and the gateway in front of it (its URL), for as long as the block runs."""
    upstream = FakeAnthropic(files=files).start()
    entry = {"model_name": MODEL, "model_info": {"max_input_tokens": WINDOW},
             "litellm_params": {"model": f"anthropic/{MODEL}", "api_base": upstream.url,
                                "api_key": UPSTREAM_KEY}}
    try:
        with gateway(entry) as served:
            yield upstream, served
    finally:
        upstream.stop()


def _run(prompt: str, url: str, cwd: Path, home: Path, *tools: str) -> subprocess.CompletedProcess[str]:
    """``claude -p prompt``, as a user runs it against the gateway (telemetry and updates off)."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "ANTHROPIC_BASE_URL": url,
           "ANTHROPIC_API_KEY": "sk-anything", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    limits = ["--tools", ",".join(tools), "--allowedTools", ",".join(tools)] if tools else []
    return subprocess.run([str(CLAUDE_CODE.executable()), "-p", prompt, "--model", MODEL, *limits],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)


def _blocks(request: Seen) -> list[dict]:
    return [b for m in request.json["messages"] if isinstance(m["content"], list) for b in m["content"]]


def _assert_every_read_answered(request: Seen) -> None:
    """All 15 ``Read`` calls and their results reach the request, in Anthropic's own blocks, in order."""
    blocks = _blocks(request)
    ids = [f"{READ_ID}{n}" for n in range(FILES)]
    assert [b["id"] for b in blocks if b["type"] == "tool_use"] == ids
    assert [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"] == ids


def _task(files: list[str], prompt: str, cwd: Path, home: Path, *tools: str) -> tuple[Run, list[Seen]]:
    """One Claude Code run through the gateway; its record, and the upstream's loop requests as seen."""
    with _stack(files) as (upstream, served):
        done = _run(prompt, served.url, cwd, home, *tools)
        run = Run(done, [r.json for r in upstream.loop_requests()], served.metrics(), served.failures(),
                  CLAUDE_CODE.version())
    return run, upstream.loop_requests()


@pytest.fixture(scope="module")
def codeword(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, list[Seen]]:
    """Issue 28's 15-file task, Claude Code's own defaults (every tool, ``max_tokens: 32000``), run
    once for the tests below."""
    folder = tmp_path_factory.mktemp("claude-task")
    files = codeword_task.write(folder)
    return _task(files, codeword_task.TASK, folder, tmp_path_factory.mktemp("claude-home"))


def test_claude_code_reads_15_files_through_a_32k_model(tmp_path: Path) -> None:
    project = write_project(tmp_path, FILES)
    run, loop = _task(project, TASK, Path(project[0]).parent, tmp_path / "home", "Read")
    run.ended_well()
    assert FINAL_TEXT in run.done.stdout
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
    assert 'action="compressed"' in run.metrics


def test_claude_code_completes_the_codeword_task(codeword: tuple[Run, list[Seen]]) -> None:
    """Every step reached, every read paired with its result, the task kept, ``max_tokens`` lowered."""
    run, loop = codeword
    run.ended_well()
    assert len(loop) == FILES + 1
    assert {r.json["max_tokens"] for r in loop} <= LOWERED_REPLIES
    _assert_every_read_answered(loop[-1])
    assert codeword_task.TASK in json.dumps(loop[-1].json["messages"])


# Issue 28 is not done for Claude Code (the lead works on it in issue 34): its own system prompt and
# tools take ~21k of the 32k window, and the task names f0.txt and f14.txt as well as f3.txt, so the
# task reset keeps f3's codeword in some runs and f0's in others (Claude Code's reminders differ from
# run to run). Only this assertion is expected to fail; not strict: when it passes it says so (XPASS).
@pytest.mark.xfail(reason="issue 34: f3's codeword survives Claude Code's resets only sometimes (room is "
                          "tight: ~21k of the 32k window is Claude Code's own prompt and tools)",
                   strict=False)
def test_claude_code_keeps_the_codeword_the_task_asks_for(codeword: tuple[Run, list[Seen]]) -> None:
    run, loop = codeword
    assert_codeword_kept(json.dumps(loop[-1].json["messages"]), run.done.stdout)
