"""Property tests of the multi-turn path through the real ``Preparer.prepare``, in this process.

Random conversations (roles, parallel tool calls, thinking blocks, error results, nested and broken
JSON arguments, unclosed tags, huge and empty texts, content as a string or as parts) under random
configs, against what the docs promise: the newest user message is never cut to a placeholder (a
short one is sent as written, a long one keeps its end), the request fits the window beside the
reply, tool calls keep their ids, names and (JSON) arguments and stay paired with their results,
a cold second instance sends the same bytes, and, turn after turn, what was sent is sent again
unless a reset is reported. (Doubled inputs are timed in ``test_history_builds`` and
``bench.builds``: timing has no place among random examples.)

``make test`` runs a bounded profile (``ci``); ``make fuzz`` a longer one (``HYPOTHESIS_PROFILE=fuzz``).
Examples found are kept below as ``@example``s.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import model
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from gateway.compress.compressor import Compressor
from gateway.config import parse_config
from gateway.conversation import evidence, forms
from gateway.core.prepare import ChatCall, Preparer
from gateway.errors import ContextLengthExceeded
from gateway.metrics import Metrics
from gateway.run.workers import Workers
from mixpr.tokens import count_tokens

settings.register_profile("ci", max_examples=12, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("fuzz", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
UPSTREAM = "gpt-4o-mini"

# -- texts -----------------------------------------------------------------------------------------


def _listing(seed: int, lines: int) -> str:
    return "\n".join(f"{i:5}\tdef handler_{seed}_{i}(value):  return parse(value, {i})" for i in range(lines))


def _prose(seed: int, sentences: int) -> str:
    return " ".join(f"Clause {seed}.{n} says the tenant keeps the garden tidy." for n in range(sentences))


texts = st.one_of(
    st.just(""),
    st.text(max_size=40),
    st.builds(_listing, st.integers(0, 99), st.integers(1, 400)),
    st.builds(_prose, st.integers(0, 99), st.integers(1, 300)),
    st.builds(lambda n: "<system-reminder>x" * n, st.integers(1, 3000)),
    st.builds(lambda a, b: f"{a}\n\n{b}", st.builds(_prose, st.integers(0, 9), st.integers(50, 400)),
              st.sampled_from(["Which clause names the garden?", "What does handler_3_7 return?"])),
)

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20), texts),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8,
)
arguments = st.one_of(
    st.builds(lambda v: json.dumps({"path": "f.py", "value": v}), json_values),
    st.builds(lambda depth: "[" * depth + "]" * depth, st.integers(1, 5000)),
    st.just("{not json"),
    st.just(""),
)


def _content(text: str, as_parts: bool) -> Any:
    return [{"type": "text", "text": text}] if as_parts else text


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(texts) or "Agent."})
    messages.append({"role": "user", "content": _content(draw(texts) or "Go.", draw(st.booleans()))})
    ids = iter(range(10_000))
    for _ in range(draw(st.integers(1, 6))):
        calls = [{"id": f"call_{next(ids)}", "type": "function",
                  "function": {"name": draw(st.sampled_from(["bash", "Read", "edit_file"])),
                               "arguments": draw(arguments)}}
                 for _ in range(draw(st.integers(0, 3)))]
        said: dict[str, Any] = {"role": "assistant", "content": draw(texts) or None}
        if calls:
            said["tool_calls"] = calls
        if draw(st.booleans()):
            said["thinking_blocks"] = [{"type": "thinking", "thinking": "I should look.", "signature": "sig"}]
        messages.append(said)
        for call in calls:
            output = draw(texts)
            if draw(st.integers(0, 4)) == 0:
                output = "Error: command failed with exit code 1\n" + output
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        if not calls or draw(st.booleans()):
            asked = draw(texts) or "Next?"
            messages.append({"role": "user", "content": _content(asked, draw(st.booleans()))})
    return messages


configs = st.fixed_dictionaries({
    "window": st.sampled_from([8192, 16_000, 32_000]),
    "compress_above_tokens": st.one_of(st.none(), st.integers(1500, 12_000)),
    "budget_tokens": st.one_of(st.just("auto"), st.integers(300, 6000)),
    "first_sight": st.sampled_from(["auto", "after_trigger", "always"]),
    "max_tokens": st.one_of(st.none(), st.integers(16, 32_000)),
})

# -- the gateway in this process ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def runner() -> Iterator[tuple[asyncio.Runner, Compressor]]:
    with asyncio.Runner() as loop:
        compressor = Compressor(Workers(workers=1, executor="thread", timeout_s=120), route_cache_size=16)
        loop.run(compressor.start(with_router=False))
        yield loop, compressor
        compressor.close()


def _preparer(compressor: Compressor, config: dict[str, Any]) -> Preparer:
    mixpr = {"budget_tokens": config["budget_tokens"], "router": "heuristic",
             "prefix": {"first_sight": config["first_sight"]}}
    if config["compress_above_tokens"] is not None:
        mixpr["compress_above_tokens"] = config["compress_above_tokens"]
    entry = model("m", UPSTREAM, "http://127.0.0.1:9", model_info={"max_input_tokens": config["window"]},
                  mixpr=mixpr)
    return Preparer(parse_config({"model_list": [entry]}), compressor, Metrics())


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _calls(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["id"], c["function"]["name"]) for m in messages for c in m.get("tool_calls") or ()]


def _results(messages: list[dict[str, Any]]) -> list[str]:
    return [m["tool_call_id"] for m in messages if m["role"] == "tool"]


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _check(original: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    assert [m["role"] for m in sent] == [m["role"] for m in original]
    assert _calls(sent) == _calls(original) and _results(sent) == _results(original)
    for before, after in zip(original, sent, strict=True):
        for a, b in zip(before.get("tool_calls") or (), after.get("tool_calls") or (), strict=True):
            if _parses(a["function"]["arguments"]):
                assert _parses(b["function"]["arguments"])
        assert before.get("thinking_blocks") == after.get("thinking_blocks")
    newest = max(i for i, m in enumerate(original) if m["role"] == "user")
    asked, got = _text(original[newest]).strip(), _text(sent[newest]).strip()
    if got.startswith(evidence.OPEN) and not asked.startswith(evidence.OPEN):  # a follow-up's evidence
        got = got.split(evidence.CLOSE, 1)[1].strip()
    assert not got.startswith("[… message of"), "the newest user message became a placeholder"
    if count_tokens(asked, UPSTREAM) < 200:
        assert got == asked
    else:
        assert got.endswith(asked[-40:].strip()) or got.endswith(forms.split_question(asked)[1][-40:])


@settings(settings.get_profile(PROFILE))
@given(conversation=conversations(), config=configs)
@example(  # the newest user message one paragraph, the system prompt over a cost trigger (issue 35)
    conversation=[{"role": "system", "content": _listing(0, 250)},
                  {"role": "user", "content": _prose(1, 300)},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "call_0", "content": _listing(2, 150)}],
    config={"window": 32_000, "compress_above_tokens": 3000, "budget_tokens": 1000, "first_sight": "auto",
            "max_tokens": None})
@example(  # a short follow-up brings evidence before its own words, which stay as written (fuzz, stop 37)
    conversation=[{"role": "user", "content": _listing(0, 16)}, {"role": "assistant", "content": None},
                  {"role": "user", "content": _listing(0, 1)}],
    config={"window": 8192, "compress_above_tokens": None, "budget_tokens": 300, "first_sight": "auto",
            "max_tokens": None})
def test_the_multi_turn_path_keeps_its_promises(runner: tuple[asyncio.Runner, Compressor],
                                                 conversation: list[dict[str, Any]],
                                                 config: dict[str, Any]) -> None:
    loop, compressor = runner
    params = {"max_tokens": config["max_tokens"]} if config["max_tokens"] else {}
    call = ChatCall("m", conversation, params)
    try:
        outcome = loop.run(_preparer(compressor, config).prepare(call))
    except ContextLengthExceeded:
        return  # what is never compressed does not fit: a 400, which is a promise too
    event(f"action={outcome.action}")
    event(f"reset={outcome.resets > 0}")
    _check(conversation, outcome.messages)
    reply = outcome.max_tokens[1] if outcome.max_tokens else (config["max_tokens"] or 1024)
    assert outcome.final_tokens + reply <= config["window"]
    again = loop.run(_preparer(compressor, config).prepare(call))  # a cold instance
    assert json.dumps(again.messages) == json.dumps(outcome.messages)


def _turns(conversation: list[dict[str, Any]]) -> list[int]:
    """The requests a client sends for ``conversation``, by their ends: just before each assistant
    turn but the first (every call before it has its results), and the whole of it."""
    assistants = [i for i, m in enumerate(conversation) if m["role"] == "assistant"]
    return [*assistants[1:], len(conversation)]


@settings(settings.get_profile(PROFILE))
@given(conversation=conversations(), config=configs)
def test_what_was_sent_is_sent_again_unless_a_reset_is_reported(
        runner: tuple[asyncio.Runner, Compressor], conversation: list[dict[str, Any]],
        config: dict[str, Any]) -> None:
    """The provider's prompt cache hits only on bytes sent before. One instance gets every turn of
    the conversation as a client sends them: unless a request reports a reset (``x-mixpr-reset``),
    the previous request's messages come again as they were sent."""
    loop, compressor = runner
    params = {"max_tokens": config["max_tokens"]} if config["max_tokens"] else {}
    preparer = _preparer(compressor, config)
    before: tuple[int, list[dict[str, Any]]] | None = None
    for end in _turns(conversation):
        try:
            outcome = loop.run(preparer.prepare(ChatCall("m", conversation[:end], params)))
        except ContextLengthExceeded:
            before = None  # a 400: nothing was sent
            continue
        event(f"reset={outcome.reset}")
        if before is not None and not outcome.reset:
            cut, sent = before
            assert outcome.messages[:cut] == sent, f"the request of {cut} messages changed, no reset said"
        before = (end, outcome.messages)
