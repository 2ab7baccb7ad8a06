"""Resets: the causal scan, and what a reset may touch."""

from __future__ import annotations

import json
import random
import time
from typing import Any

from gateway.compress import resets


def test_the_scan_is_causal() -> None:
    """The reset points of a conversation's first k messages are those of every longer one."""
    sizes = [50, 400, 30, 900, 30, 800, 30, 700, 30, 900, 30, 600]

    def harder(js: list[int], levels: list[int]) -> list[int]:
        return [sizes[j] // (2**level) for j, level in zip(js, levels, strict=True)]

    def run(k: int) -> resets.Scan:
        return resets.scan(
            sizes[:k],
            10,
            room=2000,
            after=1200,
            older_end=lambda i: max(0, i - 1),
            last_end=lambda i: i,
            harder=harder,
            max_level=4,
        )

    full = run(len(sizes))
    assert full.points and full.total <= 2000
    for k in range(1, len(sizes)):
        assert run(k).points == [p for p in full.points if p < k]


def _tool_loop(output: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": "cat log"})}}
    return [
        {"role": "user", "content": "Fix the failing build."},
        {"role": "assistant", "content": "Reading the log.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
        {"role": "assistant", "content": "The error is in src/build_config.py, see parseArgs."},
        {"role": "user", "content": "Go on."},
    ]


def test_an_output_the_agent_refers_to_is_not_stale() -> None:
    named = _tool_loop("Traceback: src/build_config.py line 3 in parseArgs")
    unnamed = _tool_loop("Traceback: lib/other.py line 3 in main")
    assert resets.stale(named, 4, [2]) == [] and resets.stale(unnamed, 4, [2]) == [2]


def test_a_long_hex_string_is_read_in_linear_time() -> None:
    """A 20 kB run of hex in an output (a digest, a blob): the identifier pattern backtracked
    quadratically on it (about 20 s); the precise figure for 50 kB is printed by ``bench.builds``."""
    messages = _tool_loop("checksum " + "ab12" * 5_000 + "\nsrc/build_config.py failed")
    started = time.perf_counter()
    assert resets.stale(messages, 4, [2]) == []
    assert time.perf_counter() - started < 1.0


def test_identifiers_are_those_the_pattern_finds_in_ordinary_text() -> None:
    rng = random.Random(3)
    text = "".join(rng.choice("aB_./-x1 \n:") for _ in range(200_000))
    assert resets.identifiers(text) == resets.IDENTIFIER.findall(text)


class _Counted(dict):  # type: ignore[type-arg]
    """A message that counts how often the scan reads it."""

    reads = 0

    def get(self, *args: Any) -> Any:
        _Counted.reads += 1
        return super().get(*args)


def _scan_work(turns: int) -> int:
    """Reads of messages and sizes asked for, scanning a cost-mode loop of one-line steps (nothing
    can shrink, so the total stays over the room from early on)."""
    messages: list[dict[str, Any]] = [_Counted(role="user", content="Keep going.")]
    for step in range(turns):
        call = {"id": f"c{step}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        messages += [_Counted(role="assistant", content="ok", tool_calls=[call]),
                     _Counted(role="tool", tool_call_id=f"c{step}", content="done")]
    asked = 0

    def harder(js: list[int], levels: list[int]) -> list[int]:
        nonlocal asked
        asked += len(js)
        return [10] * len(js)

    _Counted.reads = 0
    reach = resets.Reach(messages)
    resets.scan([10] * len(messages), 0, room=1_000, after=600,
                older_end=reach.older_end, last_end=reach.last_end,
                harder=harder, max_level=6, stale=lambda i, older: resets.stale(messages, i, older))
    return _Counted.reads + asked


def test_a_scan_that_cannot_shrink_anything_is_linear() -> None:
    """Once the older messages cannot shrink, each later message must not re-run the reset over all
    of them (400 steps took 4.2x the work of 200: it grew as the square; bench.builds times 3,000)."""
    assert _scan_work(400) <= 2.5 * _scan_work(200)
