"""Observe mode's would-have figures against a cold instance's, in this process (``gateway.core.observe``).

What compressing would have sent for a turn, and how much of it repeats the gateway's own previous
request, is a function of the request: a turn whose would-have build was skipped (the shadow queue
full) must not change the next turn's figures. The client's own bytes, which observe mode sends and
remembers, are not what compressing would have sent before.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from conftest import model

from gateway.compress.compressor import Compressor
from gateway.config import parse_config
from gateway.core.prepare import ChatCall, Preparer
from gateway.metrics import Metrics
from gateway.run.workers import Workers

UPSTREAM = "gpt-4o-mini"


def _listing(step: int, lines: int = 40) -> str:
    return "\n".join(f"{i:5}\tdef handler_{step}_{i}(value):  return parse(value, {i})" for i in range(lines))


def _loop(steps: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Make the parser accept trailing commas."}]
    for step in range(steps):
        call = {"id": f"c{step}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{step}.py"})}}
        messages += [{"role": "assistant", "content": f"Reading f{step}.py", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{step}", "content": _listing(step)}]
    return messages


def _preparer(compressor: Compressor) -> Preparer:
    entry = model("m", UPSTREAM, "http://127.0.0.1:9", model_info={"max_input_tokens": 16_000},
                  mixpr={"mode": "observe", "router": "heuristic", "budget_tokens": 1500,
                         "compress_above_tokens": 3000})
    # shadow_share 1: every turn the queue takes is computed at once (the time share is test_shadow's).
    config = parse_config({"model_list": [entry], "general_settings": {"shadow_share": 1}})
    return Preparer(config, compressor, Metrics())


async def _drained(preparer: Preparer) -> None:
    for _ in range(6000):
        if preparer.shadow.held == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the shadow queue did not drain")


def _figures(preparer: Preparer) -> tuple[float, ...]:
    m = preparer.metrics
    kinds = ("original", "would_send")
    return tuple(metric.labels("m", kind)._value.get()
                 for metric in (m.shadow_tokens, m.shadow_cached_tokens) for kind in kinds)


async def _turns(preparer: Preparer, ends: list[int], skip: set[int]) -> list[tuple[str, tuple[float, ...]]]:
    """Each turn (``end`` tool steps) prepared in turn, its shadow state and figures; a turn in
    ``skip`` finds the shadow queue full."""
    conversation, seen = _loop(max(ends)), []
    for end in ends:
        before = _figures(preparer)
        if end in skip:
            preparer.shadow.held = preparer.shadow.size  # the queue full: this turn is skipped
        outcome = await preparer.prepare(ChatCall("m", conversation[: 2 + 2 * end]))
        if end in skip:
            preparer.shadow.held = 0
        await _drained(preparer)
        figures = tuple(b - a for a, b in zip(before, _figures(preparer), strict=True))
        seen.append((dict(outcome.shadow)["x-mixpr-shadow"], figures))
    return seen


def test_a_skipped_turn_leaves_the_next_turns_figures_as_a_cold_instance_has_them() -> None:
    async def scenario() -> tuple[list[tuple[str, tuple[float, ...]]], list[tuple[str, tuple[float, ...]]]]:
        compressor = Compressor(Workers(workers=1, executor="thread", timeout_s=120), route_cache_size=16)
        await compressor.start(with_router=False)
        try:
            return (await _turns(_preparer(compressor), [4, 5, 6], skip={5}),
                    await _turns(_preparer(compressor), [6], skip=set()))
        finally:
            compressor.close()

    warm, [cold] = asyncio.run(scenario())
    assert [state for state, _ in warm] == ["sampled", "skipped", "sampled"]
    assert cold[0] == "sampled" and cold[1][3] > 0  # the gateway's own previous bytes, recomputed
    # original, would_send, original_cached, would_send_cached
    assert warm[-1][1] == cold[1]
