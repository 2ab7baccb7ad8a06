"""A conversation's prefix in the provider's cache: warm or cold, and the reset a cold turn makes."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.compress.compressor import Compressor
from gateway.config import parse_config
from gateway.conversation import warmth
from gateway.core.prepare import ChatCall, Preparer, report_headers
from gateway.metrics import Metrics
from gateway.run.workers import Workers

LIFETIME = 0.4  # seconds: the provider's cache lifetime, in the config
UNUSED = "http://127.0.0.1:9"  # nothing is forwarded
# Anthropic-style prices (writes 1.25x): with no later turn expected (reset_horizon 0) a reset below
# the window never pays, so what resets here is the cold turn alone.
PRICES = {"input_cost_per_token": 3e-6, "cache_read_input_token_cost": 3e-7,
          "cache_creation_input_token_cost": 3.75e-6}


def _listing(step: int, lines: int) -> str:
    return "\n".join(f"{i:5}\tdef handler_{step}_{i}(value):  return parse(value, {i})" for i in range(lines))


def _agent(steps: int) -> list[dict[str, Any]]:
    """An agent loop of ``steps`` tool calls, each answered by a 150-line listing (~3k tokens): four
    files, read again and again, as agents do."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Make the parser accept trailing commas."}]
    for step in range(steps):
        file = step % 4
        call = {"id": f"c{step}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{file}.py"})}}
        messages += [{"role": "assistant", "content": f"Reading f{file}.py", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{step}", "content": _listing(file, 150)}]
    return messages


def _config(prefix: dict[str, Any], redis_url: str | None = None) -> dict[str, Any]:
    # Cost mode: forms at first sight (about 11k tokens for 10 steps), a 40k trigger, a 4k budget.
    mixpr = {"router": "heuristic", "budget_tokens": 4000, "compress_above_tokens": 40_000,
             "prefix": {"first_sight": "always", "cache_lifetime_s": LIFETIME, **prefix}}
    entry = {"model_name": "m", "litellm_params": {"model": "anthropic/acme-internal", "api_base": UNUSED},
             "model_info": {"max_input_tokens": 200_000, **PRICES}, "mixpr": mixpr}
    secret = "warmth-test-" + "s" * 32
    shared = {"form_cache_url": redis_url, "deployment_secret": secret} if redis_url else {}
    return {"model_list": [entry], "general_settings": shared}


def _noted(steps: int) -> list[dict[str, Any]]:
    """``_agent``'s loop, each of the agent's notes a first paragraph and then long reasoning."""
    messages = _agent(steps)
    for number, message in enumerate(messages):
        if message["role"] == "assistant":
            reasoning = "\n".join(f"Reason {k} for step {number}: the parser drops it." for k in range(40))
            message["content"] = f"Plan {number}: read the next file.\n\n{reasoning}"
    return messages


def _typed(steps: int) -> list[dict[str, Any]]:
    """``_agent``'s loop after a step that read ``g.py`` once; the agent's third call after it types
    that listing's first lines again (an edit's old text), in a call short enough to go as written."""
    messages = _agent(steps)
    read = {"id": "g", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": "cat g.py"})}}
    messages[2:2] = [{"role": "assistant", "content": "Reading g.py", "tool_calls": [read]},
                     {"role": "tool", "tool_call_id": "g", "content": _listing(9, 150)}]
    typed = "\n".join(_listing(9, 6).split("\n"))
    call = messages[8]["tool_calls"][0]["function"]
    call["arguments"] = json.dumps({"command": "edit g.py", "old": typed})
    return messages


def _turns(pauses: list[float], prefix: dict[str, Any] | None = None, redis_url: str | None = None,
           replicas: list[int] | None = None, metrics: Metrics | None = None,
           agent: Any = _agent) -> list[Any]:
    """One conversation's requests, a step apart, each after its pause (seconds) since the last;
    ``replicas``: which of two gateways (their own memory, one Redis) prepares each; ``agent``: the
    loop of so many steps."""

    async def main() -> list[Any]:
        compressor = Compressor(Workers(workers=1, executor="thread", timeout_s=120), route_cache_size=16)
        await compressor.start(with_router=False)
        config = parse_config(_config(prefix or {}, redis_url))
        preparers = [Preparer(config, compressor, metrics or Metrics()) for _ in range(2)]
        out = []
        try:
            for step, pause in enumerate(pauses):
                await asyncio.sleep(pause)
                preparer = preparers[replicas[step] if replicas else 0]
                out.append(await preparer.prepare(ChatCall("m", agent(10 + step))))
                await asyncio.sleep(0.05)  # Redis is written in the background: let it land
        finally:
            for preparer in preparers:
                await preparer.aclose()
            compressor.close()
        return out

    return asyncio.run(main())


def test_a_cold_turn_resets_and_later_turns_keep_that_reset() -> None:
    metrics = Metrics()
    first, warm, cold, after = _turns([0, 0, 1.5 * LIFETIME, 0], metrics=metrics)
    assert first.cache is None  # its first request with an earlier turn: nothing remembered before it
    assert (warm.cache, warm.reset) == ("warm", False)
    assert (cold.cache, cold.reset) == ("cold", True), "a cold cache rewrites the prefix: cut it then"
    # The older copies of each file's listing are gone; the newest of each stays whole.
    assert cold.final_tokens < 0.6 * warm.final_tokens
    sent = "\n".join(str(m.get("content")) for m in cold.messages)
    for file in range(4):
        assert f"def handler_{file}_3(value)" in sent
    assert report_headers(cold)["x-mixpr-cache"] == "cold"
    # The next request finds the cold turn's reset in memory and makes it again: it only appends.
    assert (after.cache, after.reset) == ("warm", False)
    assert after.reused_tokens > 0.9 * cold.final_tokens
    sample = metrics.registry.get_sample_value
    turns = {state: sample("mixpr_cache_turns_total", {"model": "m", "state": state})
             for state in ("cold", "warm")}
    assert turns == {"cold": 1.0, "warm": 2.0}


def test_a_cold_turn_cuts_the_agents_older_notes_to_their_first_paragraph() -> None:
    *_, cold, after = _turns([0, 0, 1.5 * LIFETIME, 0], agent=_noted)
    notes = [m for m in cold.messages if m["role"] == "assistant"]
    older, newest = notes[:-5], notes[-5:]
    assert all(m["content"].startswith("Plan ") and "earlier notes omitted" in m["content"] for m in older)
    assert all("Reason 39 for step" in m["content"] for m in newest), "the newest five turns stay whole"
    written = [m["tool_calls"] for m in _noted(12) if m["role"] == "assistant"]
    assert [m["tool_calls"] for m in notes] == written  # the calls go as the agent wrote them
    assert (after.reset, after.reused_tokens > 0.9 * cold.final_tokens) == (False, True)


def test_a_cold_turn_drops_the_lines_the_agent_typed_again_in_a_call() -> None:
    *_, cold = _turns([0, 0, 1.5 * LIFETIME], agent=_typed)
    [listing] = [m["content"] for m in cold.messages if m.get("tool_call_id") == "g"]
    assert "def handler_9_2(value)" not in listing and "lines repeated below" in listing
    sent = "\n".join(str(m.get("content")) + json.dumps(m.get("tool_calls")) for m in cold.messages)
    assert "def handler_9_2(value)" in sent  # in the agent's own call, later


def test_replicas_share_when_a_conversation_was_last_sent(redis_server: Any) -> None:
    # The second replica never saw the conversation: Redis tells it the prefix went out before the
    # pause, so it finds the cache cold and cuts; the first then finds that cut in Redis and keeps it.
    turns = _turns([0, 0, 1.5 * LIFETIME, 0], redis_url=redis_server.url, replicas=[0, 0, 1, 0])
    assert [(t.cache, t.reset) for t in turns[1:]] == [("warm", False), ("cold", True), ("warm", False)]


def test_a_warm_turn_does_not_reset() -> None:
    turns = _turns([0, 0, 0.25 * LIFETIME, 0])
    assert [t.cache for t in turns[1:]] == ["warm", "warm", "warm"]
    assert not any(t.reset for t in turns)
    assert report_headers(turns[-1])["x-mixpr-cache"] == "warm"


def test_cold_reset_off_reports_the_cold_turn_and_keeps_the_prefix() -> None:
    turns = _turns([0, 0, 1.5 * LIFETIME], {"cold_reset": False})
    assert (turns[-1].cache, turns[-1].reset) == ("cold", False)


@pytest.mark.parametrize(("wanted", "gated", "cuts"), [
    ("auto", True, True), ("auto", False, False), (True, False, True), (False, True, False)])
def test_a_cold_turn_cuts_in_cost_mode_unless_told(wanted: Any, gated: bool, cuts: bool) -> None:
    from gateway.conversation.history import _cold_cut

    config = parse_config(_config({"cold_reset": wanted}))
    request = SimpleNamespace(settings=config.model("m").settings(config.mixpr_settings))
    assert _cold_cut(request, gated) is cuts  # type: ignore[arg-type]


@pytest.mark.parametrize(("model", "configured", "messages", "params", "expected"), [
    ("anthropic/claude-sonnet-4-5", None, [], {}, 300.0),
    ("bedrock/anthropic.claude-3-haiku", None, [], {}, 300.0),
    ("anthropic/claude-sonnet-4-5", None,
     [{"role": "system", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral",
                                                                                   "ttl": "1h"}}]}],
     {}, 3600.0),
    ("openai/gpt-5", None, [], {}, 600.0),
    ("openai/gpt-5", None, [], {"prompt_cache_retention": "24h"}, 86400.0),
    ("openai/gpt-5", 30.0, [], {}, 30.0),
    ("hosted_vllm/qwen", None, [], {}, None),  # a local server's cache has no lifetime: never cold
    ("hosted_vllm/qwen", 120.0, [], {}, 120.0),
])
def test_the_cache_lifetime_by_provider_and_request(model, configured, messages, params, expected) -> None:
    hour = warmth.asks_an_hour(messages, params.get("tools"))
    assert warmth.lifetime(model, configured, params, hour=hour) == expected


def test_a_conversation_nobody_saw_is_neither_warm_nor_cold() -> None:
    now = time.time()
    assert warmth.cold(None, 300.0, now) is None
    assert warmth.cold(warmth.Visit(now - 10), None, now) is None
    assert warmth.cold(warmth.Visit(now - 10), 300.0, now) is False
    assert warmth.cold(warmth.Visit(now - 400), 300.0, now) is True
    assert warmth.Visit.decoded(warmth.Visit(now, (3, 9)).encoded()) == warmth.Visit(now, (3, 9))
    assert warmth.Visit.decoded(b"not json") is None
