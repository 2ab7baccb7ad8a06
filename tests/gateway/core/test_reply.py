"""A reply the model cannot give is lowered, not refused (issue 28, item 5), over real HTTP.

A 32k-window model asked for ``max_tokens: 32000`` (Claude Code's default) by a prompt that does not
fit beside it: the upstream receives the lowered limit, on every API and both ways of forwarding
(the raw relays and LiteLLM), the response says so in ``x-mixpr-max-tokens``, and only a prompt
whose never-compressed parts leave no reply of ``completion_reserve_tokens`` gets a 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from conftest import MASTER_KEY, UPSTREAM_KEY, ServerThread, model
from corpus import QUESTION, filler
from fake_anthropic import FakeAnthropic
from fake_upstream import FakeUpstream

from gateway import create_app
from gateway.config import parse_config
from gateway.core import reply
from mixpr.tokens import count_tokens

if TYPE_CHECKING:
    import anthropic

WINDOW = 32_768
ASKED = 32_000  # Claude Code's max_tokens for Claude models
CEILING = WINDOW // 4  # a quarter of the window
FLOOR = 1024  # completion_reserve_tokens' default
OUTPUT = 4000  # model_info.max_output_tokens of "w32k-out"
COST_BUDGET = 2000  # budget_tokens of "w32k-cost"
SCALE = 1.25  # the gateway's model tokens per tiktoken token for a model it has no tokenizer for


def _text(tokens: int, seed: int = 0) -> str:
    """Book-like text of about ``tokens`` tokens (gpt-4o-mini's count)."""
    text = filler(tokens // 17, seed=seed)
    assert abs(count_tokens(text, "gpt-4o-mini") - tokens) < 0.1 * tokens
    return text


def _config(base: str, anthropic_url: str) -> dict[str, Any]:
    window = {"max_input_tokens": WINDOW}
    claude = {"model_name": "claude-sonnet-4-6", "model_info": window,
              "litellm_params": {"model": "anthropic/claude-sonnet-4-5", "api_base": anthropic_url,
                                 "api_key": UPSTREAM_KEY}}
    short = {**window, "max_output_tokens": OUTPUT}
    return {"model_list": [model("w32k", "w32k", base, model_info=window),
                           model("w8k", "w8k", base, model_info={"max_input_tokens": 8192},
                                 mixpr={"compress_above_tokens": 6000}),
                           model("w32k-out", "w32k-out", base, model_info=short),
                           model("w32k-cost", "w32k-cost", base, model_info=window,
                                 mixpr={"budget_tokens": COST_BUDGET}), claude],
            "mixpr_settings": {"router": "heuristic"},
            "general_settings": {"master_key": MASTER_KEY, "compression_workers": 1}}


@pytest.fixture(scope="module")
def claude_upstream() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def url(upstream: FakeUpstream, claude_upstream: FakeAnthropic) -> Iterator[str]:
    server = ServerThread(create_app(parse_config(_config(upstream.base_url, claude_upstream.url)))).start()
    yield server.url
    server.stop()


@pytest.fixture
def chat(url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=120) as client:
        yield client


@pytest.fixture
def messages_client(url: str) -> Iterator[anthropic.Anthropic]:
    import anthropic
    with anthropic.Anthropic(base_url=url, api_key=MASTER_KEY, max_retries=0, timeout=120) as client:
        yield client


def _received(upstream: FakeUpstream, name: str, path: str = "/chat/completions") -> dict[str, Any]:
    [sent] = [r.json for r in upstream.received(name) if r.path.endswith(path)]
    return sent


def _user(tokens: int, seed: int = 0) -> list[dict[str, Any]]:
    return [{"role": "user", "content": _text(tokens, seed) + "\n\n" + QUESTION}]


@pytest.mark.parametrize("param", ["max_tokens", "max_completion_tokens"])
def test_a_prompt_that_does_not_fit_beside_the_reply_gets_the_reply_lowered(
        chat: openai.OpenAI, upstream: FakeUpstream, param: str) -> None:
    """3k tokens and 32,000 for the reply overflow 32,768: relayed as sent, the reply at 8,192."""
    upstream.clear()
    messages = _user(3000)
    raw = chat.chat.completions.with_raw_response.create(model="w32k", messages=messages, **{param: ASKED})
    assert raw.headers["x-mixpr-max-tokens"] == f"{ASKED}->{CEILING}"
    assert raw.headers["x-mixpr-action"] == "passthrough"
    sent = _received(upstream, "w32k")
    assert sent[param] == CEILING and sent["messages"] == messages


def test_a_reply_that_leaves_the_prompt_a_quarter_of_the_window_is_kept(chat: openai.OpenAI,
                                                                         upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = chat.chat.completions.with_raw_response.create(model="w32k", messages=_user(300), max_tokens=20_000)
    assert "x-mixpr-max-tokens" not in raw.headers
    assert _received(upstream, "w32k")["max_tokens"] == 20_000


def test_the_reply_does_not_depend_on_whether_the_prompt_fits(chat: openai.OpenAI,
                                                              upstream: FakeUpstream) -> None:
    """300 tokens fit beside 32,000 in 32,768, but the conversation's later turns would not: its
    reply (and so its room, and its reset points) is the ceiling from the first turn on."""
    upstream.clear()
    raw = chat.chat.completions.with_raw_response.create(model="w32k", messages=_user(300), max_tokens=ASKED)
    assert raw.headers["x-mixpr-max-tokens"] == f"{ASKED}->{CEILING}"
    assert _received(upstream, "w32k")["max_tokens"] == CEILING


def test_the_prompt_is_compressed_before_the_reply_is_lowered(chat: openai.OpenAI,
                                                              upstream: FakeUpstream) -> None:
    """8,192 tokens, compressed above 6,000: a 6.3k-token question with 4,000 asked for the reply went
    out almost whole (6,137 tokens) with the reply halved to 2,048. 4,000 leave the prompt over a
    quarter of the window: the prompt is compressed into the rest and the reply kept."""
    upstream.clear()
    raw = chat.chat.completions.with_raw_response.create(model="w8k", messages=_user(6300, seed=5),
                                                         max_tokens=4000)
    assert "x-mixpr-max-tokens" not in raw.headers
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert int(raw.headers["x-mixpr-compressed-tokens"]) <= 8192 - 4000
    assert _received(upstream, "w8k")["max_tokens"] == 4000


def test_a_long_prompt_is_compressed_into_what_the_lowered_reply_leaves(
        chat: openai.OpenAI, upstream: FakeUpstream, url: str) -> None:
    """40k tokens: compressed (through LiteLLM) to fit beside 8,192 tokens of reply, not beside 32,000."""
    upstream.clear()
    raw = chat.chat.completions.with_raw_response.create(model="w32k", messages=_user(40_000, seed=1),
                                                         max_tokens=ASKED, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert raw.headers["x-mixpr-max-tokens"] == f"{ASKED}->{CEILING}"
    kept = int(raw.headers["x-mixpr-compressed-tokens"])
    assert 0.8 * (WINDOW - CEILING) <= kept <= WINDOW - CEILING
    assert _received(upstream, "w32k")["max_tokens"] == CEILING
    assert 'mixpr_replies_lowered_total{model="w32k"}' in httpx.get(url + "/metrics").text


def test_a_reply_that_fits_beside_the_compressed_prompt_keeps_it(chat: openai.OpenAI,
                                                                upstream: FakeUpstream) -> None:
    """A cost budget of 2,000 tokens: a 40k-token prompt is sent as about 2,000, so 24,000 tokens of
    reply fit beside it and are left as asked."""
    upstream.clear()
    raw = chat.chat.completions.with_raw_response.create(model="w32k-cost", messages=_user(40_000, seed=4),
                                                         max_tokens=24_000)
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert "x-mixpr-max-tokens" not in raw.headers
    assert int(raw.headers["x-mixpr-compressed-tokens"]) <= COST_BUDGET + 50
    assert _received(upstream, "w32k-cost")["max_tokens"] == 24_000


def test_the_models_max_output_tokens_is_the_ceiling(chat: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = chat.chat.completions.with_raw_response.create(model="w32k-out", messages=_user(3000),
                                                         max_tokens=ASKED)
    assert raw.headers["x-mixpr-max-tokens"] == f"{ASKED}->{OUTPUT}"
    assert _received(upstream, "w32k-out")["max_tokens"] == OUTPUT


def test_responses_max_output_tokens_is_lowered(chat: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = chat.responses.with_raw_response.create(model="w32k", input=_text(3000), max_output_tokens=ASKED)
    assert raw.headers["x-mixpr-max-tokens"] == f"{ASKED}->{CEILING}"
    assert _received(upstream, "w32k")["max_tokens"] == CEILING


def test_legacy_completions_max_tokens_is_lowered(chat: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = chat.completions.with_raw_response.create(model="w32k", prompt=_text(3000), max_tokens=ASKED)
    assert raw.headers["x-mixpr-max-tokens"] == f"{ASKED}->{CEILING}"
    assert _received(upstream, "w32k", "/completions")["max_tokens"] == CEILING


def test_anthropic_messages_to_a_chat_model_are_lowered(messages_client: anthropic.Anthropic,
                                                         upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = messages_client.messages.with_raw_response.create(
        model="w32k", max_tokens=ASKED, messages=[{"role": "user", "content": _text(3000)}])
    assert raw.headers["x-mixpr-max-tokens"] == f"{ASKED}->{CEILING}"
    assert _received(upstream, "w32k")["max_tokens"] == CEILING


def test_anthropic_messages_relayed_to_claude_lower_the_thinking_budget_too(
        messages_client: anthropic.Anthropic, claude_upstream: FakeAnthropic) -> None:
    """What Claude Code sends a Claude model: max_tokens 32,000 and thinking on 31,999 of them."""
    claude_upstream.requests.clear()
    raw = messages_client.messages.with_raw_response.create(
        model="claude-sonnet-4-6", max_tokens=ASKED, messages=[{"role": "user", "content": _text(3000)}],
        thinking={"type": "enabled", "budget_tokens": ASKED - 1})
    assert raw.headers["x-mixpr-max-tokens"] == f"{ASKED}->{CEILING}"
    [sent] = [r.json for r in claude_upstream.requests]
    assert sent["max_tokens"] == CEILING
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": CEILING - 1}


def test_never_compressed_parts_too_long_for_the_ceiling_leave_the_least_reply(
        chat: openai.OpenAI, upstream: FakeUpstream) -> None:
    """A 26k-token system prompt: 8,192 tokens of reply do not fit beside it, 1,024 do."""
    upstream.clear()
    messages = [{"role": "system", "content": _text(int(26_000 / SCALE), seed=2)}, *_user(200)]
    raw = chat.chat.completions.with_raw_response.create(model="w32k", messages=messages, max_tokens=ASKED)
    assert raw.headers["x-mixpr-max-tokens"] == f"{ASKED}->{FLOOR}"
    assert _received(upstream, "w32k")["max_tokens"] == FLOOR


def test_no_room_for_the_least_reply_is_a_400_in_the_apis_shape(
        chat: openai.OpenAI, messages_client: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    import anthropic
    upstream.clear()
    system = _text(32_000, seed=3)
    with pytest.raises(openai.BadRequestError) as caught:
        messages = [{"role": "system", "content": system}, *_user(200)]
        chat.chat.completions.create(model="w32k", messages=messages, max_tokens=ASKED)
    error = caught.value.body
    assert error["code"] == "context_length_exceeded"
    assert f"lowered from {ASKED} to {FLOOR}" in error["message"] and str(WINDOW) in error["message"]
    with pytest.raises(anthropic.BadRequestError) as refused:
        messages_client.messages.create(model="w32k", max_tokens=ASKED, system=system,
                                        messages=[{"role": "user", "content": QUESTION}])
    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert f"lowered from {ASKED} to {FLOOR}" in refused.value.body["error"]["message"]
    assert upstream.received("w32k") == []


def test_switched_off_compression_leaves_the_reply_alone(chat: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = chat.chat.completions.with_raw_response.create(
        model="w32k", messages=_user(3000), max_tokens=ASKED, extra_headers={"x-mixpr-enabled": "false"})
    assert "x-mixpr-max-tokens" not in raw.headers
    assert _received(upstream, "w32k")["max_tokens"] == ASKED


# -- the pure policy ----------------------------------------------------------------------------


def test_the_ceiling_is_a_share_of_the_window_within_the_models_output_and_the_floor() -> None:
    assert reply.ceiling(WINDOW, None, FLOOR) == CEILING
    assert reply.ceiling(WINDOW, 4000, FLOOR) == 4000
    assert reply.ceiling(WINDOW, 64_000, FLOOR) == CEILING
    assert reply.ceiling(2048, None, FLOOR) == FLOOR


def test_the_reply_kept_is_a_function_of_the_window_the_constant_parts_and_the_reply_asked() -> None:
    asked = reply.Reply("max_tokens", ASKED, ASKED)
    assert reply.kept(asked, WINDOW, 0, CEILING, FLOOR).tokens == CEILING
    assert reply.kept(asked, WINDOW, 21_000, CEILING, FLOOR).tokens == FLOOR  # Claude Code's prompt and tools
    assert reply.kept(asked, 200_000, 21_000, 50_000, FLOOR) == asked
    small = reply.Reply("max_tokens", 4000, 4000)
    assert reply.kept(small, 8192, 100, 2048, FLOOR) == small


def test_a_thinking_budget_is_never_lowered_under_anthropics_least() -> None:
    """A reply lowered to 1,024 made the thinking budget 1,023: Anthropic refuses under 1,024. With
    thinking, the least reply holds 1,024 of thinking and the floor beside it."""
    params = {"max_tokens": ASKED, "thinking": {"type": "enabled", "budget_tokens": ASKED - 1}}
    least = reply.least(params, FLOOR)
    assert least == FLOOR + reply.THINKING_MIN and reply.least({"max_tokens": ASKED}, FLOOR) == FLOOR
    asked = reply.asked(params, FLOOR)
    lowered = reply.kept(asked, WINDOW, 30_000, CEILING, least)
    assert lowered.tokens == least
    sent = reply.forwarded(params, (ASKED, lowered.tokens))
    assert sent["thinking"]["budget_tokens"] == least - 1 >= reply.THINKING_MIN
    assert reply.forwarded(params, (ASKED, 1024))["thinking"]["budget_tokens"] == reply.THINKING_MIN


def test_forwarded_lowers_only_what_the_client_set() -> None:
    params = {"max_tokens": ASKED, "temperature": 0, "thinking": {"type": "adaptive"}}
    assert reply.forwarded(params, (ASKED, CEILING)) == {**params, "max_tokens": CEILING}
    assert reply.forwarded(params, None) is params
    assert json.dumps(reply.header((ASKED, CEILING))) == json.dumps({"x-mixpr-max-tokens": "32000->8192"})
