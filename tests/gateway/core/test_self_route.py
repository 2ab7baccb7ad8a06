"""Self-Route: a compressed prompt that cannot answer is escalated once, to a longer window."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import MASTER_KEY, ServerThread, model
from corpus import QUESTION, haystack
from fake_upstream import GUESS_TEXT, FakeUpstream

from gateway import create_app
from gateway.config import ConfigError, parse_config
from gateway.core import self_route

CODE = "amber-falcon-427"
# A fact the vault question never retrieves: compression drops it, only the full text has it.
ASIDE = "The miller's grey cat, who slept on the flour sacks, was called Biscuit."
SR = {"enabled": True, "fallback_model": "sr-big"}


def _config(base: str) -> dict[str, Any]:
    small = {"max_input_tokens": 3000}
    return {
        "model_list": [
            model("sr", "mode-needle-sr", base, model_info=small,
                  mixpr={"budget_tokens": 800, "self_route": SR}),
            model("sr-big", "mode-needle-big", base, model_info={"max_input_tokens": 128000}),
            model("sr-same", "mode-needle-same", base, model_info={"max_input_tokens": 8000},
                  mixpr={"budget_tokens": 300, "self_route": {"enabled": True}}),
            model("sr-auto", "mode-needle-auto", base, model_info=small,
                  mixpr={"self_route": {"enabled": True}}),
            model("sr-to-broken", "mode-needle-tb", base, model_info=small,
                  mixpr={"budget_tokens": 800, "self_route": {"enabled": True, "fallback_model": "broken"}}),
            model("broken", "mode-500", base),
        ],
        "mixpr_settings": {"router": "heuristic"},
        "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread",
                             "compression_workers": 1},
    }


@pytest.fixture(scope="module")
def sr_url(upstream: FakeUpstream) -> Iterator[str]:
    server = ServerThread(create_app(parse_config(_config(upstream.base_url)))).start()
    yield server.url
    server.stop()


@pytest.fixture
def sr_client(sr_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sr_url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=60) as c:
        yield c


def _messages(seed: int, aside: str = ASIDE) -> list[dict[str, Any]]:
    # The aside is a paragraph of its own, far from the needle: MixPR keeps a short paragraph whole
    # once most of it matches, so an aside inside the needle's paragraph would be kept with it.
    document = haystack(600, seed=seed)
    document = f"{aside}\n\n{document}" if aside else document
    return [{"role": "system", "content": "Answer from the document."},
            {"role": "user", "content": f"{document}\n\n{QUESTION}"}]


def _ask(client: openai.OpenAI, name: str, messages: list, needle: str, stream: bool, **extra: Any):
    raw = client.chat.completions.with_raw_response.create(
        model=name, messages=messages, stream=stream, extra_body={"needle": needle}, **extra)
    result = raw.parse()
    if stream:
        return raw.headers, "".join(c.choices[0].delta.content or "" for c in result if c.choices)
    return raw.headers, result.choices[0].message.content


def _sent(upstream: FakeUpstream, name: str) -> list[dict[str, Any]]:
    return [r.json for r in upstream.received(name)]


def _has_instruction(request: dict[str, Any]) -> bool:
    return json.dumps(self_route.INSTRUCTION)[1:-1] in json.dumps(request["messages"])


def _metric(url: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    match = re.search(rf"^{name}\{{{re.escape(wanted)}\}} (\S+)$", httpx.get(url + "/metrics").text, re.M)
    return float(match.group(1)) if match else 0.0


# -- over HTTP ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_answered_when_compression_kept_the_needle(
    sr_client: openai.OpenAI, upstream: FakeUpstream, sr_url: str, stream: bool
) -> None:
    upstream.clear()
    before = _metric(sr_url, "mixpr_self_route_requests_total", model="sr", outcome="answered")
    headers, text = _ask(sr_client, "sr", _messages(seed=1), CODE, stream)
    assert text == CODE
    assert headers["x-mixpr-self-route"] == "answered"
    assert "x-mixpr-escalated-to" not in headers
    assert headers["x-mixpr-action"] == "compressed"
    [sent] = _sent(upstream, "mode-needle-sr")
    assert sent["messages"][-1]["content"].endswith(QUESTION + "\n\n" + self_route.INSTRUCTION)
    assert _sent(upstream, "mode-needle-big") == []
    assert _metric(sr_url, "mixpr_self_route_requests_total", model="sr", outcome="answered") == before + 1


@pytest.mark.parametrize("stream", [False, True])
def test_escalated_to_the_fallback_with_the_original_messages(
    sr_client: openai.OpenAI, upstream: FakeUpstream, sr_url: str, stream: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.core.chat")
    upstream.clear()
    labels = {"model": "sr", "escalated_to": "sr-big"}
    tokens_before = _metric(sr_url, "mixpr_self_route_escalation_tokens_total", **labels)
    before = _metric(sr_url, "mixpr_self_route_requests_total", model="sr", outcome="escalated")
    messages = _messages(seed=2)
    headers, text = _ask(sr_client, "sr", messages, "Biscuit", stream)
    assert text == "Biscuit"  # the client sees only the escalated answer
    assert headers["x-mixpr-self-route"] == "escalated"
    assert headers["x-mixpr-escalated-to"] == "sr-big"
    assert headers["x-mixpr-action"] == "passthrough"  # the original fits the fallback's window
    [first] = _sent(upstream, "mode-needle-sr")
    assert _has_instruction(first) and "Biscuit" not in json.dumps(first["messages"])
    [escalated] = _sent(upstream, "mode-needle-big")
    assert escalated["messages"] == messages  # the original, without the instruction
    assert escalated["needle"] == "Biscuit"  # every other parameter as the client sent it
    assert _metric(sr_url, "mixpr_self_route_requests_total", model="sr", outcome="escalated") == before + 1
    spent = _metric(sr_url, "mixpr_self_route_escalation_tokens_total", **labels) - tokens_before
    assert spent == int(headers["x-mixpr-original-tokens"]) > 10_000
    [line] = [r.getMessage() for r in caplog.records if "self-route" in r.getMessage()]
    assert "model=sr to=sr-big" in line and "Biscuit" not in caplog.text and "mill" not in caplog.text


def test_escalation_without_fallback_retries_with_four_times_the_budget(
    sr_client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    upstream.clear()
    headers, _ = _ask(sr_client, "sr-same", _messages(seed=3), "Biscuit", stream=False)
    assert headers["x-mixpr-self-route"] == "escalated"
    assert headers["x-mixpr-escalated-to"] == "sr-same"
    first, retry = _sent(upstream, "mode-needle-same")
    assert _has_instruction(first) and not _has_instruction(retry)
    assert len(json.dumps(retry["messages"])) > 3 * len(json.dumps(first["messages"]))
    assert int(headers["x-mixpr-compressed-tokens"]) <= 4 * 300 + 50  # the budget, plus system and framing


def test_not_self_routed_when_the_window_is_already_full(
    sr_client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    """No fallback and an auto budget that took all the room: nothing larger to escalate to."""
    upstream.clear()
    headers, text = _ask(sr_client, "sr-auto", _messages(seed=4), "Biscuit", stream=False)
    assert "x-mixpr-self-route" not in headers and headers["x-mixpr-action"] == "compressed"
    [sent] = _sent(upstream, "mode-needle-auto")
    assert not _has_instruction(sent) and text in ("Biscuit", GUESS_TEXT)


@pytest.mark.parametrize("extra", [
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
    {"response_format": {"type": "json_object"}},
    {"n": 2},
])
def test_never_for_tools_structured_output_or_several_choices(
    sr_client: openai.OpenAI, upstream: FakeUpstream, extra: dict[str, Any]
) -> None:
    upstream.clear()
    headers, text = _ask(sr_client, "sr", _messages(seed=5), "Biscuit", stream=False, **extra)
    assert "x-mixpr-self-route" not in headers
    assert text == GUESS_TEXT  # asked once, without the instruction, and not escalated
    [sent] = _sent(upstream, "mode-needle-sr")
    assert not _has_instruction(sent)
    assert _sent(upstream, "mode-needle-big") == []


def test_short_prompts_are_not_self_routed(sr_client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    messages = [{"role": "user", "content": "Say hello."}]
    headers, text = _ask(sr_client, "sr", messages, "Biscuit", stream=False)
    assert headers["x-mixpr-action"] == "passthrough" and "x-mixpr-self-route" not in headers
    assert [r["messages"] for r in _sent(upstream, "mode-needle-sr")] == [messages]


@pytest.mark.parametrize("stream", [False, True])
def test_an_error_from_the_escalated_call_is_that_error(
    sr_url: str, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.clear()
    body = {"model": "sr-to-broken", "messages": _messages(seed=6), "needle": "Biscuit", "stream": stream}
    response = httpx.post(sr_url + "/v1/chat/completions", json=body, timeout=60,
                          headers={"Authorization": f"Bearer {MASTER_KEY}"})
    assert response.status_code == 500
    assert response.json()["error"]["message"] == "The upstream broke"
    assert len(_sent(upstream, "mode-needle-tb")) == 1 and len(_sent(upstream, "mode-500")) == 1


def test_unknown_fallback_model_fails_the_config() -> None:
    raw = {"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/x"},
                           "mixpr": {"self_route": {"enabled": True, "fallback_model": "gpt-huge"}}}]}
    with pytest.raises(ConfigError, match="self_route.fallback_model must name a model in model_list; "
                                          "unknown: gpt-huge"):
        parse_config(raw)
    raw = {**raw, "mixpr_settings": {"self_route": {"fallback_model": "nope"}}}
    with pytest.raises(ConfigError, match="unknown: gpt-huge, nope"):
        parse_config(raw)


def test_per_model_switch_keeps_the_global_fallback() -> None:
    raw = {"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/x"},
                           "mixpr": {"self_route": {"enabled": True}}},
                          {"model_name": "big", "litellm_params": {"model": "openai/y"}}],
           "mixpr_settings": {"self_route": {"fallback_model": "big"}}}
    config = parse_config(raw)
    settings = config.model("m").settings(config.mixpr_settings)
    assert (settings.self_route.enabled, settings.self_route.fallback_model) == (True, "big")
    assert config.model("big").settings(config.mixpr_settings).self_route.enabled is False


# -- units --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("reply", "expected"), [
    ("unanswerable", True),
    ("Unanswerable.", True),
    ('  "UNANSWERABLE"\n', True),
    ("**Unanswerable**", True),
    ("Unanswerable: the text does not say who built the mill.", True),
    ("unanswerables", False),
    ("The answer is unanswerable.", False),
    ("Unfortunately the text does not say.", False),
    ("amber-falcon-427", False),
    ("", False),
])
def test_unanswerable_matcher(reply: str, expected: bool) -> None:
    assert self_route.is_unanswerable(reply) is expected


@pytest.mark.parametrize(("prefix", "expected"), [
    ("", None), (" \"", None), ("Unans", None), ("unanswerable", None),
    ("Un", None), ("Unf", False), ("unanswerable.", True), ("unanswerableness", False), ("42", False),
])
def test_verdict_on_a_prefix_waits_while_the_word_is_possible(prefix: str, expected: bool | None) -> None:
    assert self_route.verdict(prefix, final=False) is expected


def _chunks(*texts: str) -> list[dict[str, Any]]:
    first = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    return [first] + [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]


class _Stream:
    """An upstream stream that records how far it was read and whether it was closed."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks, self.read, self.closed = chunks, 0, False

    async def gen(self) -> AsyncIterator[dict[str, Any]]:
        try:
            for chunk in self.chunks:
                self.read += 1
                yield chunk
        finally:
            self.closed = True


async def _drain(stream: AsyncIterator[dict[str, Any]]) -> list[dict[str, Any]]:
    return [chunk async for chunk in stream]


async def test_hold_back_escalates_a_word_split_across_chunks() -> None:
    source = _Stream(_chunks("Unans", "werable.", " More text."))
    unanswerable, rest = await self_route.hold_back(source.gen())
    assert unanswerable is True
    assert source.closed and source.read == 3  # stopped at the first chunk that decided
    assert await _drain(rest) == []


async def test_hold_back_streams_everything_through_unchanged() -> None:
    chunks = _chunks("Un", "fortunately", " the text", " does not say.")
    source = _Stream(chunks)
    unanswerable, rest = await self_route.hold_back(source.gen())
    assert unanswerable is False and source.read == 3  # held back only "", "Un", "fortunately"
    assert await _drain(rest) == chunks
    assert source.closed


async def test_hold_back_at_the_end_of_a_short_stream() -> None:
    unanswerable, _ = await self_route.hold_back(_Stream(_chunks("unanswerable")).gen())
    assert unanswerable is True
    unanswerable, rest = await self_route.hold_back(_Stream(_chunks("Un")).gen())
    assert unanswerable is False and await _drain(rest) == _chunks("Un")


def test_instruction_goes_on_a_copy_of_the_last_user_message() -> None:
    doc = {"type": "text", "text": "doc"}
    messages = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [doc]}, {"role": "tool", "content": "x"}]
    original = json.loads(json.dumps(messages))
    sent = self_route.with_instruction(messages)
    assert messages == original
    assert sent[2]["content"] == [doc, {"type": "text", "text": self_route.INSTRUCTION}]
    assert sent[:2] == messages[:2] and sent[3] == messages[3]
    assert self_route.with_instruction([{"role": "user", "content": "Q?"}])[0]["content"] == (
        "Q?\n\n" + self_route.INSTRUCTION)
