"""History builds in this process (thread workers): what one odd message does to the rest."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

import mixpr.engine
from gateway.compress import checks, forms
from gateway.compress.compressor import Compressor, Outcome
from gateway.compress.history import History, Request
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings, Prefix
from gateway.errors import ContextLengthExceeded
from gateway.run.workers import Workers

DEEP = "[" * 100_000  # parsing it recurses past Python's limit
TASK = "Make the parser accept trailing commas."


# Cut at first sight: these tests are about forms, not about when a conversation first needs them.
FORMS: dict[str, Any] = {"first_sight": "always", "min_tokens": 400, "keep_tokens": 150}


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


def _build(*conversations: list[dict[str, Any]], window: int = 32_000, timeout_s: float = 60,
           prefix: Prefix | None = None, tools: Any = None, budget: int | str = "auto") -> list[Outcome]:
    """Each conversation prepared in turn by one History (a cold instance, then warm)."""

    async def main() -> list[Outcome]:
        workers = Workers(workers=1, executor="thread", timeout_s=timeout_s)
        compressor = Compressor(workers, route_cache_size=16)
        await compressor.start(with_router=False)
        history = History(compressor, cache_bytes=64 * 1024 * 1024)
        settings = MixprSettings(router="heuristic", prefix=prefix or Prefix(**FORMS),
                                 budget_tokens=budget)
        target = Target("gpt-4o-mini", window, 1024)
        try:
            return [await history.prepare(Request(messages, tools, target, settings, Control(), None))
                    for messages in conversations]
        finally:
            compressor.close()

    return asyncio.run(main())


def test_a_deeply_nested_output_or_argument_keeps_the_conversation_on_forms() -> None:
    """``"[" * 100_000`` in a tool output and in a call's arguments: the request still goes out as
    forms, checked (the RecursionError used to throw the build away, for every later request)."""
    messages = _loop([_listing(0), DEEP, _listing(2)], arguments={1: '{"path": ' + DEEP})
    [outcome] = _build(messages)
    assert outcome.route == "forms" and not outcome.failed_open
    assert checks.problems(messages, outcome.messages) == []
    assert len(outcome.messages[-1]["content"]) < len(messages[-1]["content"])  # the rest still compressed


def test_the_library_reads_a_deeply_nested_text_as_text() -> None:
    result = mixpr.engine.compress(DEEP + "\n" + _listing(0), budget_tokens=200, kind="auto")
    assert 0 < len(result.text) < len(DEEP)


ODD = "odd-output-marker"


def _failing_for_odd(monkeypatch: pytest.MonkeyPatch, fail: Callable[[], Any]) -> None:
    """Form jobs of pieces holding ``ODD`` fail with ``fail()`` (the workers are threads here)."""
    real = forms.form_job

    def form_job(piece: forms.Piece, asked: int, model: str | None) -> tuple[str, int]:
        if ODD in piece.text:
            fail()
        return real(piece, asked, model)

    monkeypatch.setattr(forms, "form_job", form_job)


def _raise() -> None:
    raise ValueError("a pathological text")


@pytest.mark.parametrize("fail", [_raise, lambda: time.sleep(4)], ids=["raises", "times-out"])
def test_one_failing_form_does_not_cost_the_others_theirs(monkeypatch: pytest.MonkeyPatch,
                                                          fail: Callable[[], Any]) -> None:
    _failing_for_odd(monkeypatch, fail)
    outputs = [_listing(step) for step in range(20)]
    outputs[3] = ODD + "\n" + outputs[3]
    messages = _loop(outputs)
    [outcome] = _build(messages, timeout_s=2)
    assert outcome.route == "forms" and checks.problems(messages, outcome.messages) == []
    sent = [m["content"] for m in outcome.messages if m["role"] == "tool"]
    assert sent[3] == outputs[3]  # the odd one keeps its own text
    assert sum(len(text) < len(output) / 2 for text, output in zip(sent, outputs, strict=True)) >= 10


def test_a_cold_instance_builds_a_long_session_as_a_warm_one_does() -> None:
    """300 steps, cold, with a pool timeout a whole conversation's forms in one batch per worker
    would overrun (so the build fell back to compressing the whole request, other bytes)."""
    messages = _loop([_listing(step) for step in range(300)])
    cold, warm = _build(messages, messages, window=128_000, timeout_s=2)
    assert cold.route == "forms" and cold.new_forms > 0 and warm.new_forms == 0
    assert cold.messages == warm.messages


def _loop_work(messages: list[dict[str, Any]], window: int) -> float:
    """The most CPU time the event loop's thread spends between two heartbeats while ``messages`` is
    prepared (thread time: on a shared machine waiting for a core is no work of ours)."""

    async def main() -> float:
        workers = Workers(workers=1, executor="thread", timeout_s=120)
        compressor = Compressor(workers, route_cache_size=16)
        await compressor.start(with_router=False)
        history = History(compressor, cache_bytes=64 * 1024 * 1024)
        settings = MixprSettings(router="heuristic", prefix=Prefix(**FORMS))
        request = Request(messages, None, Target("gpt-4o-mini", window, 1024), settings, Control(), None)
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
        await history.prepare(request)
        done.set()
        await beating
        compressor.close()
        return max(gaps)

    return asyncio.run(main())


def _claude_code_body(blocks: int) -> list[dict[str, Any]]:
    """A long tool loop as LiteLLM hands a Claude Code body over: ``blocks`` calls and results."""
    return _loop([f"ok {step}: src/module_{step}.py updated" for step in range(blocks // 2)])


@pytest.mark.parametrize(("messages", "window"), [
    ([{"role": "user", "content": (_listing(0, lines=2_000) + "\n") * 60 + "\n\nWhich handler parses 17?"}],
     128_000),
    (_claude_code_body(5_000), 128_000),
    (_loop([_listing(step, lines=120) for step in range(200)]), 32_000),
], ids=["8-MB-message", "5000-blocks", "200-steps-cold-with-resets"])
def test_a_huge_request_leaves_the_loop_free(messages: list[dict[str, Any]], window: int) -> None:
    """Remembering what was sent hashes every message: for one of 8 MB that took the loop ~34 ms.
    Between two heartbeats the loop's thread never works more than 20 ms."""
    worst = _loop_work(messages, window)
    assert worst < 0.020, f"the loop worked {worst * 1000:.1f} ms at a stretch"


def test_breakpoints_on_tools_count_toward_the_four() -> None:
    """Claude Code marks its tools, its system prompt and its newest turns: with four markers already,
    a fifth on the previous request's end would be refused by Anthropic (400)."""
    marker = {"type": "ephemeral"}
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}, "cache_control": marker}]
    messages = _loop([_listing(step) for step in range(3)])
    messages[0] = {"role": "system", "content": [{"type": "text", "text": "Agent.", "cache_control": marker}]}
    for i in (-1, -5):
        messages[i] = {**messages[i], "content": [{"type": "text", "text": messages[i]["content"],
                                                   "cache_control": marker}]}
    [outcome] = _build(messages, prefix=Prefix(**FORMS, breakpoint=True), tools=tools)
    assert outcome.route == "forms"
    assert checks.breakpoints(outcome.messages) + len(tools) == checks.MAX_BREAKPOINTS


def test_whole_request_compression_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """When a build fails, the whole request is compressed as one; that must not rewrite an assistant
    turn with thinking blocks (its provider checks it as it was sent): too long to go out as it is,
    the client is told why instead."""
    thinking = [{"type": "thinking", "thinking": "Look at the handlers.", "signature": "sig"}]
    messages = [
        {"role": "user", "content": _listing(0, lines=400) + "\n\nWhich handler parses 17?"},
        {"role": "assistant", "content": _listing(1, lines=400), "thinking_blocks": thinking},
        {"role": "user", "content": "And which one parses 18?"},
    ]

    def broken(*args: Any) -> Outcome:
        raise RuntimeError("a build that failed")

    monkeypatch.setattr(History, "_build", broken)
    with pytest.raises(ContextLengthExceeded, match="thinking blocks"):
        _build(messages, window=4_000)
