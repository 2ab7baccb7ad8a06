"""History builds in this process (thread workers): what one odd message does to the rest."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import mixpr
from gateway.compress import checks
from gateway.compress.compressor import Compressor, Outcome
from gateway.compress.history import History, Request
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings, Prefix
from gateway.run.workers import Workers

DEEP = "[" * 100_000  # parsing it recurses past Python's limit
TASK = "Make the parser accept trailing commas."


def _step(step: int, output: str, arguments: str | None = None) -> list[dict[str, Any]]:
    call = {"id": f"c{step}", "type": "function",
            "function": {"name": "bash", "arguments": arguments or json.dumps({"path": f"f{step}.py"})}}
    return [{"role": "assistant", "content": f"Reading f{step}.py", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{step}", "content": output}]


def _listing(step: int, lines: int = 150) -> str:
    return "\n".join(f"{i:6}\tdef handler_{step}_{i}(value):  return parse(value, {i})" for i in range(lines))


def _loop(outputs: list[str], arguments: dict[int, str] | None = None) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Agent."},
                                      {"role": "user", "content": TASK}]
    for step, output in enumerate(outputs):
        messages += _step(step, output, (arguments or {}).get(step))
    return messages


def _build(messages: list[dict[str, Any]], *, window: int = 32_000, prefix: Prefix | None = None,
           setup: Callable[[History], None] | None = None) -> Outcome:
    async def main() -> Outcome:
        workers = Workers(workers=1, executor="thread", timeout_s=60)
        compressor = Compressor(workers, route_cache_size=16)
        await compressor.start(with_router=False)
        history = History(compressor, cache_bytes=64 * 1024 * 1024)
        if setup is not None:
            setup(history)
        settings = MixprSettings(router="heuristic", prefix=prefix or Prefix(min_tokens=400, keep_tokens=150))
        try:
            target = Target("gpt-4o-mini", window, 1024)
            return await history.prepare(Request(messages, None, target, settings, Control(), None))
        finally:
            compressor.close()

    return asyncio.run(main())


def test_a_deeply_nested_output_or_argument_keeps_the_conversation_on_forms() -> None:
    """``"[" * 100_000`` in a tool output and in a call's arguments: the request still goes out as
    forms, checked (the RecursionError used to throw the build away, for every later request)."""
    messages = _loop([_listing(0), DEEP, _listing(2)], arguments={1: '{"path": ' + DEEP})
    outcome = _build(messages)
    assert outcome.route == "forms" and not outcome.failed_open
    assert checks.problems(messages, outcome.messages) == []
    assert len(outcome.messages[-1]["content"]) < len(messages[-1]["content"])  # the rest still compressed


def test_the_library_reads_a_deeply_nested_text_as_text() -> None:
    result = mixpr.compress(DEEP + "\n" + _listing(0), budget_tokens=200, kind="auto")
    assert 0 < len(result.text) < len(DEEP)
