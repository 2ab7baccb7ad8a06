"""What a reset drops first: what a cold turn drops, the copies and the older notes, before MixPR cuts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.compress.compressor import Compressor
from gateway.config import parse_config
from gateway.core.prepare import ChatCall, Preparer
from gateway.metrics import Metrics
from gateway.run.workers import Workers

UNUSED = "http://127.0.0.1:9"  # nothing is forwarded


def _listing(file: int, lines: int = 150) -> str:
    return "\n".join(f"{i:5}\tdef handler_{file}_{i}(value):  return parse(value, {i})" for i in range(lines))


def _agent(steps: int) -> list[dict[str, Any]]:
    """An agent that reads two files by turns (each read again and again), with long notes."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Make the parser accept trailing commas."}]
    for step in range(steps):
        call = {"id": f"c{step}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{step % 2}.py"})}}
        reasons = "\n".join(f"Reason {k} for step {step}: the parser drops the comma." for k in range(30))
        messages += [{"role": "assistant", "content": f"Plan {step}: read f{step % 2}.py.\n\n{reasons}",
                      "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{step}", "content": _listing(step % 2)}]
    return messages


def _prepared(messages: list[dict[str, Any]]) -> Any:
    """``messages`` through a gateway whose model has a 12k window: the loop passes it, a reset."""
    entry = {"model_name": "m", "litellm_params": {"model": "openai/acme-internal", "api_base": UNUSED},
             "model_info": {"max_input_tokens": 12_000}, "mixpr": {"router": "heuristic"}}

    async def main() -> Any:
        compressor = Compressor(Workers(workers=1, executor="thread", timeout_s=120), route_cache_size=16)
        await compressor.start(with_router=False)
        preparer = Preparer(parse_config({"model_list": [entry]}), compressor, Metrics())
        try:
            return await preparer.prepare(ChatCall("m", messages))
        finally:
            await preparer.aclose()
            compressor.close()

    return asyncio.run(main())


def test_a_reset_drops_the_copies_and_the_older_notes_before_it_cuts() -> None:
    outcome = _prepared(_agent(12))
    assert outcome.resets >= 1
    outputs = [str(m["content"]) for m in outcome.messages if m["role"] == "tool"]
    # The older reads of each file left their lines to the newest read, which keeps them.
    assert any("lines repeated below" in text for text in outputs[:-2])
    notes = [str(m["content"]) for m in outcome.messages if m["role"] == "assistant"]
    assert "earlier notes omitted" in notes[0] and notes[0].startswith("Plan 0: read f0.py.")
    assert "Reason 29 for step 11" in notes[-1]  # the newest turn's notes stay whole
