"""A conversation's build that fails falls back to compressing the whole request (``History.today``):
every earlier byte may change, and the report says so (``x-mixpr-reset``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.compress.compressor import Compressor, Outcome
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings, Prefix
from gateway.conversation.history import History, Request
from gateway.run.workers import Workers


def _loop(steps: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Agent."},
                                      {"role": "user", "content": "Make the parser accept trailing commas."}]
    for step in range(steps):
        listing = "\n".join(f"{i:6}\tdef handler_{step}_{i}(value): return parse(value, {i})"
                            for i in range(150))
        call = {"id": f"c{step}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"path": f"f{step}.py"})}}
        messages += [{"role": "assistant", "content": f"Reading f{step}.py", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{step}", "content": listing}]
    return messages


def test_a_failed_build_reports_a_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = MixprSettings(router="heuristic", budget_tokens=3000, prefix=Prefix(first_sight="always"))
    target = Target("gpt-4o-mini", 32_000, 1024)

    async def main() -> tuple[Outcome, Outcome]:
        compressor = Compressor(Workers(workers=1, executor="thread", timeout_s=60), route_cache_size=16)
        await compressor.start(with_router=False)
        history = History(compressor, cache_bytes=64 * 1024 * 1024)
        try:
            first = await history.prepare(Request(_loop(6), None, target, settings, Control(), None), "m")

            def broken(*_: Any) -> Outcome:
                raise RuntimeError("a bug in the build")

            monkeypatch.setattr(history, "_build", broken)
            second = await history.prepare(Request(_loop(7), None, target, settings, Control(), None), "m")
            return first, second
        finally:
            compressor.close()

    first, second = asyncio.run(main())
    assert first.action == "compressed" and not first.reset
    previous = len(_loop(6))
    assert second.messages[:previous] != first.messages  # what the previous request sent changed
    assert second.reset
