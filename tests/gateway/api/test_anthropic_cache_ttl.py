"""What the client asks of Anthropic's cache, on ``/v1/messages`` as on chat completions (issue 57,
defect 7): a block's ``cache_control: {"ttl": "1h"}`` (on the system prompt, a message's block or a
tool) keeps the conversation warm for the hour, so a turn after the model's usual lifetime is neither
called cold nor cut in cost mode; and the client's markers reach the upstream as it sent them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread
from fake_anthropic import FakeAnthropic

from gateway import create_app
from gateway.config import parse_config

LIFETIME = 1.0  # seconds: the model's cache lifetime, in the config (Anthropic's own is 5 minutes)
HOUR = {"type": "ephemeral", "ttl": "1h"}
SYSTEM = "You are a coding agent."
TASK = "Make the parser accept trailing commas."
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}
AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, FakeAnthropic]]:
    fake = FakeAnthropic().start()
    # Cost mode: forms at first sight (about 11k tokens for 10 steps), a 40k trigger, a 4k budget; a
    # cold turn resets the prefix (test_warmth's setting), over the relay and through LiteLLM alike.
    mixpr = {"router": "heuristic", "budget_tokens": 4000, "compress_above_tokens": 40_000,
             "prefix": {"first_sight": "always", "cache_lifetime_s": LIFETIME}}
    entry = {"model_name": "claude", "mixpr": mixpr, "model_info": {"max_input_tokens": 200_000},
             "litellm_params": {"model": "anthropic/claude-sonnet-4-5", "api_base": fake.url,
                                "api_key": "sk-ant-test-000000"}}
    # The same model with the gateway's own breakpoint on the previous request's last message.
    marked = {**entry, "model_name": "claude-marked",
              "mixpr": {**mixpr, "prefix": {**mixpr["prefix"], "breakpoint": True}}}
    general = {"master_key": MASTER_KEY, "compression_workers": 1, "compression_executor": "thread"}
    config = {"model_list": [entry, marked], "general_settings": general}
    server = ServerThread(create_app(parse_config(config))).start()
    yield server.url, fake
    server.stop()
    fake.stop()


def _listing(file: int) -> str:
    return "\n".join(f"{i:5}\tdef handler_{file}_{i}(value):  return parse(value, {i})" for i in range(150))


def _messages_body(steps: int, where: str) -> dict[str, Any]:
    """An agent loop of ``steps`` reads of four files (each ~3k tokens), in Messages blocks, with the
    hour-long marker ``where`` the client put it."""
    mark = {"cache_control": HOUR}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": TASK, **(mark if where == "message" else {})}]}]
    for step in range(steps):
        name = f"f{step % 4}.py"
        call = {"type": "tool_use", "id": f"c{step}", "name": "bash", "input": {"command": f"cat {name}"}}
        messages += [{"role": "assistant", "content": [{"type": "text", "text": f"Reading {name}"}, call]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{step}",
                                                   "content": _listing(step % 4)}]}]
    system = [{"type": "text", "text": SYSTEM, **(mark if where == "system" else {})}]
    tools = [{"name": "bash", "description": "Run a command.", "input_schema": SCHEMA,
              **(mark if where == "tool" else {})}]
    return {"model": "claude", "max_tokens": 64, "system": system, "messages": messages, "tools": tools}


def _chat_body(steps: int, where: str) -> dict[str, Any]:
    """The same loop as chat completions, the marker on the same part."""
    mark = {"cache_control": HOUR}
    system = {"type": "text", "text": SYSTEM, **(mark if where == "system" else {})}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": [system]},
        {"role": "user", "content": [{"type": "text", "text": TASK, **(mark if where == "message" else {})}]}]
    for step in range(steps):
        call = {"id": f"c{step}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{step % 4}.py"})}}
        messages += [{"role": "assistant", "content": f"Reading f{step % 4}.py", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{step}", "content": _listing(step % 4)}]
    tools = [{"type": "function", "function": {"name": "bash", "description": "Run a command.",
                                               "parameters": SCHEMA}, **(mark if where == "tool" else {})}]
    return {"model": "claude", "max_tokens": 64, "messages": messages, "tools": tools}


def _unmarked(value: Any) -> Any:
    """``value`` without its ``cache_control`` markers: the gateway's own breakpoint moves each turn."""
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _turns(url: str, fake: FakeAnthropic, api: str,
           where: str) -> list[tuple[httpx.Response, dict[str, Any]]]:
    """Three requests of one conversation, a step apart; the third after the configured lifetime
    (well within the hour). Each response, and the body the upstream got for it."""
    path, body = (("/v1/messages", _messages_body) if api == "messages"
                  else ("/v1/chat/completions", _chat_body))
    out = []
    # The steps are told apart per test: each conversation is its own, nothing remembered across tests.
    start = {"messages": 10, "chat": 20}[api] + {"system": 0, "message": 3, "tool": 6}[where]
    for step, pause in enumerate([0.0, 0.0, 1.5 * LIFETIME]):
        time.sleep(pause)
        response = httpx.post(url + path, json=body(start + step, where), headers=AUTH, timeout=120)
        assert response.status_code == 200, response.text
        out.append((response, fake.requests[-1].json))
    return out


@pytest.mark.parametrize("where", ["system", "message", "tool"])
@pytest.mark.parametrize("api", ["messages", "chat"])
def test_an_hour_long_cache_stays_warm_past_the_usual_lifetime(served: tuple[str, FakeAnthropic], api: str,
                                                               where: str) -> None:
    url, fake = served
    _, (warm, second), (later, third) = _turns(url, fake, api, where)
    assert warm.headers["x-mixpr-cache"] == "warm"
    # Past the model's lifetime but within the hour the client asked for: still warm, so not cut.
    assert (later.headers["x-mixpr-cache"], later.headers["x-mixpr-reset"]) == ("warm", "false")
    # What the upstream caches of the second request is what it gets again, then the new step.
    kept = _unmarked(second["messages"])
    assert _unmarked(third["messages"])[: len(kept)] == kept


@pytest.mark.parametrize("where", ["system", "message", "tool"])
def test_the_clients_markers_reach_the_upstream_as_sent(served: tuple[str, FakeAnthropic],
                                                        where: str) -> None:
    url, fake = served
    body = _messages_body(12, where)
    response = httpx.post(url + "/v1/messages", json=body, headers=AUTH, timeout=120)
    assert response.status_code == 200, response.text
    sent = fake.requests[-1].json
    assert response.headers["x-mixpr-action"] == "compressed"  # the listings went as their forms
    marked = {"system": sent["system"][0], "message": sent["messages"][0]["content"][0],
              "tool": sent["tools"][0]}[where]
    assert marked["cache_control"] == HOUR
    assert json.dumps(sent).count('"cache_control"') == 1  # the client's one marker, and no other


def _markers(value: Any) -> list[str | None]:
    """The ttl of every ``cache_control`` in ``value``, in the order the provider reads them."""
    if isinstance(value, dict):
        own = [value["cache_control"].get("ttl")] if isinstance(value.get("cache_control"), dict) else []
        return own + [t for k, v in value.items() if k != "cache_control" for t in _markers(v)]
    if isinstance(value, list):
        return [t for v in value for t in _markers(v)]
    return []


def test_the_gateways_breakpoint_never_comes_before_the_clients_hour(
        served: tuple[str, FakeAnthropic]) -> None:
    # Anthropic refuses a 5-minute marker before a 1-hour one. A client that marks its newest message
    # for the hour (chat completions) gets the gateway's breakpoint, on an earlier message, for the hour too.
    url, fake = served
    body = _chat_body(12, "system")
    body["messages"][-1]["content"] = [{"type": "text", "text": body["messages"][-1]["content"],
                                        "cache_control": HOUR}]
    body["messages"][0]["content"][0].pop("cache_control")
    response = httpx.post(url + "/v1/chat/completions", json={**body, "model": "claude-marked"}, headers=AUTH,
                          timeout=120)
    assert response.status_code == 200, response.text
    sent = fake.requests[-1].json
    ttls = _markers([sent.get("tools"), sent.get("system"), sent["messages"]])
    assert len(ttls) == 2 and ttls == ["1h", "1h"], ttls
