"""The parts of per-message forms one by one: what a piece is, the checks before forwarding, and the
event loop staying free while a long conversation is prepared."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from gateway.compress import checks, forms
from gateway.compress import messages as shape
from gateway.compress.compressor import Compressor
from gateway.compress.history import History, Request
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings, Prefix
from gateway.run.workers import Workers

TASK = "Make the parser accept trailing commas."


def _loop(steps: int, size: int = 400) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Agent."},
        {"role": "user", "content": TASK},
    ]
    for step in range(steps):
        call = {
            "id": f"c{step}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"cat -n f{step}.py"})},
        }
        lines = "\n".join(
            f"{i:6}\tdef handler_{step}_{i}(value):  return parse(value, {i})" for i in range(size)
        )
        messages += [
            {"role": "assistant", "content": f"Reading f{step}.py", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{step}", "content": lines},
        ]
    return messages


def test_a_tool_result_answers_its_call_and_the_task() -> None:
    messages = _loop(2)
    [*_, result] = [p for p in forms.pieces(messages) if p.role == "tool"]
    assert result.message == 5 and result.first_sight and not result.question
    assert 'bash {"command": "cat -n f1.py"}' in result.query and "Reading f1.py" in result.query
    assert result.query.endswith(TASK)


def test_errors_system_and_thinking_are_never_pieces() -> None:
    messages = _loop(2)
    messages[3] = {**messages[3], "content": "Error: no such file f0.py\n" * 50}
    messages[4] = {
        **messages[4],
        "thinking_blocks": [{"type": "thinking", "thinking": "hm", "signature": "s"}],
    }
    found = {(p.message, p.call) for p in forms.pieces(messages, frozenset({"c1"}))}
    assert not {m for m, _ in found} & {0, 3, 4, 5}  # system, an error, a thinking turn, a marked error


def test_arguments_are_compressed_as_json_strings() -> None:
    long = "\n".join(f"line {i}: value = compute_{i}(x)" for i in range(300))
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "write", "arguments": json.dumps({"path": "a.py", "file_text": long})},
    }
    messages = [
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
    ]
    [piece] = [p for p in forms.pieces(messages) if p.call is not None]
    assert not piece.first_sight  # only resets touch the agent's own arguments
    form, tokens = forms.form_job(piece, 100, None)
    parsed = json.loads(form)
    assert parsed["path"] == "a.py" and len(parsed["file_text"]) < len(long) / 4 and tokens < 200


def test_checks_catch_what_providers_reject() -> None:
    messages = _loop(2)
    assert checks.problems(messages, messages) == []
    swapped = [*messages[:3], messages[4], messages[3], *messages[5:]]
    assert shape.pairing(swapped) and checks.problems(messages, swapped)
    broken = json.loads(json.dumps(messages))
    broken[2]["tool_calls"][0]["function"]["arguments"] = "{not json"
    assert any("no longer JSON" in p for p in checks.problems(messages, broken))
    marked = [
        {**m, "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}
        if m["role"] == "tool"
        else m
        for m in messages
    ]
    assert checks.breakpoints(marked) == 2 and not checks.problems(marked, marked)
    changed_system = [{"role": "system", "content": "Other."}, *messages[1:]]
    assert checks.problems(messages, changed_system)


def test_the_cache_is_bounded_and_one_entry_cannot_flush_it() -> None:
    cache = forms.FormCache(64 * 1000)
    for i in range(50):
        cache.put(f"k{i}", ("x" * 300, 10))
    cache.put("huge", ("x" * 10_000, 1))  # over 1/64 of the bound: not kept
    assert cache.get("huge") is None and cache.get("k0") is not None and cache.used <= cache.max_bytes


def test_preparing_a_long_conversation_leaves_the_loop_free() -> None:
    """A cold instance prepares a 200-step loop (forms for every result, resets): between two
    heartbeats the event loop's thread never works more than 20 ms. Its CPU time is measured, not
    the wall time: on a shared machine the thread also waits for a core, which is no work of ours."""

    async def main() -> tuple[float, str]:
        workers = Workers(workers=1, executor="thread", timeout_s=60)
        compressor = Compressor(workers, route_cache_size=16)
        await compressor.start(with_router=False)
        history = History(compressor, cache_bytes=64 * 1024 * 1024)
        settings = MixprSettings(router="heuristic", prefix=Prefix(min_tokens=400, keep_tokens=150))
        request = Request(
            _loop(200, size=120), None, Target("gpt-4o-mini", 32_000, 1024), settings, Control(), None
        )
        gaps: list[float] = []
        done = asyncio.Event()

        async def heartbeat() -> None:
            last = time.thread_time()
            while not done.is_set():
                await asyncio.sleep(0.002)
                now = time.thread_time()
                gaps.append(now - last)
                last = now

        beating = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.01)
        outcome = await history.prepare(request)
        done.set()
        await beating
        compressor.close()
        return max(gaps), outcome.action

    worst, action = asyncio.run(main())
    assert action == "compressed"
    assert worst < 0.020, f"the loop stalled {worst * 1000:.1f} ms"
