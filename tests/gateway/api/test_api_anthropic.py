"""The Anthropic Messages API through the anthropic SDK, served by a chat-completions upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest
from conftest import MASTER_KEY, MAX_BODY_BYTES, SMALL_WINDOW
from corpus import NEEDLE, QUESTION, haystack
from fake_upstream import REASONING_TEXT, REPLY_TEXT, TOOL_ARGUMENTS, TOOL_CALL_ID, FakeUpstream

from mixpr.tokens import count_tokens

if TYPE_CHECKING:
    import anthropic

SYSTEM = "You answer questions about the document the user sends."
TOOLS = [{"name": "search", "description": "Search the archive.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}]
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def claude(gateway_url: str) -> Iterator[anthropic.Anthropic]:
    import anthropic
    with anthropic.Anthropic(base_url=gateway_url, api_key=MASTER_KEY, max_retries=0, timeout=30) as c:
        yield c


def _chat_requests(upstream: FakeUpstream, model: str) -> list[dict]:
    return [r.json for r in upstream.received(model) if not r.is_router_call]


def _anthropic_error(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


def test_short_message_is_forwarded_as_chat(claude: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = claude.messages.with_raw_response.create(model="gpt-test", max_tokens=64, system=SYSTEM,
                                                   messages=[{"role": "user", "content": "Hi there!  "}],
                                                   stop_sequences=["END"])
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant"
    assert [block.text for block in message.content] == [REPLY_TEXT]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (10, 5)
    assert raw.headers["x-mixpr-action"] == "passthrough"
    [sent] = _chat_requests(upstream, "echo")
    assert sent["messages"] == [{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": "Hi there!  "}]
    assert (sent["max_tokens"], sent["stop"]) == (64, ["END"])


def test_bearer_auth_works_too(gateway_url: str) -> None:
    import anthropic
    with anthropic.Anthropic(base_url=gateway_url, auth_token=MASTER_KEY, max_retries=0) as client:
        message = client.messages.create(model="gpt-test", max_tokens=16, messages=HELLO)
    assert message.content[0].text == REPLY_TEXT


@pytest.mark.parametrize("stream", [False, True])
def test_long_conversation_arrives_compressed(
    claude: anthropic.Anthropic, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.clear()
    document = haystack(600, seed=41)
    messages = [{"role": "user", "content": [{"type": "text", "text": document},
                                             {"type": "text", "text": QUESTION}]}]
    if stream:
        with claude.messages.stream(model="small", max_tokens=256, system=SYSTEM,
                                    messages=messages) as events:
            text = "".join(events.text_stream)
            headers = events.response.headers
            final = events.get_final_message()
        assert final.content[0].text == text and final.stop_reason == "end_turn"
    else:
        raw = claude.messages.with_raw_response.create(model="small", max_tokens=256, system=SYSTEM,
                                                       messages=messages)
        text, headers = raw.parse().content[0].text, raw.headers
    assert text == REPLY_TEXT
    [sent] = _chat_requests(upstream, "small")
    system, user = sent["messages"]
    assert system == {"role": "system", "content": SYSTEM}
    kept_document, kept_question = (part["text"] for part in user["content"])
    assert kept_question == QUESTION and NEEDLE in kept_document
    assert count_tokens(kept_document + kept_question, "openai/small") + 256 < SMALL_WINDOW
    assert headers["x-mixpr-action"] == "compressed"
    assert int(headers["x-mixpr-original-tokens"]) > 10_000


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_round_trip(claude: anthropic.Anthropic, upstream: FakeUpstream, stream: bool) -> None:
    upstream.clear()
    question = {"role": "user", "content": "Find the vault code."}
    if stream:
        with claude.messages.stream(model="tool-user", max_tokens=64, tools=TOOLS, messages=[question]) as s:
            kinds = [event.type for event in s]
            message = s.get_final_message()
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    else:
        message = claude.messages.create(model="tool-user", max_tokens=64, tools=TOOLS, messages=[question])
    [tool_use] = [block for block in message.content if block.type == "tool_use"]
    assert (tool_use.id, tool_use.name) == (TOOL_CALL_ID, "search")
    assert tool_use.input == json.loads(TOOL_ARGUMENTS)
    assert message.stop_reason == "tool_use"
    [first] = _chat_requests(upstream, "mode-tool")
    assert first["tools"][0]["function"]["name"] == "search"
    # The client runs the tool and sends tool_use and tool_result back: both keep their structure.
    history = [question, {"role": "assistant", "content": [tool_use.model_dump(exclude_none=True)]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id,
                                             "content": "amber-falcon-427"}]}]
    reply = claude.messages.create(model="gpt-test", max_tokens=64, tools=TOOLS, messages=history)
    assert reply.content[0].text == REPLY_TEXT
    [second] = _chat_requests(upstream, "echo")
    [call] = second["messages"][1]["tool_calls"]
    assert call["id"] == TOOL_CALL_ID and call["function"]["name"] == "search"
    assert json.loads(call["function"]["arguments"]) == json.loads(TOOL_ARGUMENTS)
    assert second["messages"][2] == {"role": "tool", "tool_call_id": TOOL_CALL_ID,
                                     "content": "amber-falcon-427"}


@pytest.mark.parametrize(("body", "message"), [
    ({"model": "gpt-test", "messages": HELLO}, "max_tokens: must be a positive integer"),
    ({"max_tokens": 5, "messages": HELLO}, "model: Field required"),
    ({"model": "gpt-test", "max_tokens": 5, "messages": []},
     "messages: must be a non-empty list of messages"),
    ({"model": "gpt-test", "max_tokens": 5, "messages": [{"role": "wizard", "content": "x"}]},
     "messages.0.role: must be 'user', 'assistant' or 'system'"),
])
def test_bad_bodies_in_anthropic_shape(http: httpx.Client, body: dict, message: str) -> None:
    response = http.post("/v1/messages", json=body)
    expected = _anthropic_error("invalid_request_error", message)
    assert (response.status_code, response.json()) == (400, expected)


def test_unparsable_and_oversized_bodies(http: httpx.Client) -> None:
    response = http.post("/v1/messages", content=b"{nope", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    huge = [{"role": "user", "content": "x" * (MAX_BODY_BYTES + 10)}]
    response = http.post("/v1/messages", json={"model": "gpt-test", "max_tokens": 5, "messages": huge})
    assert response.status_code == 413 and response.json()["error"]["type"] == "request_too_large"


def test_errors_through_the_sdk(
    claude: anthropic.Anthropic, gateway_url: str, upstream: FakeUpstream
) -> None:
    import anthropic
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(model="no-such-model", max_tokens=5, messages=HELLO)
    assert missing.value.body == _anthropic_error("not_found_error",
                                                  "The model `no-such-model` does not exist on this gateway.")
    with anthropic.Anthropic(base_url=gateway_url, api_key="sk-wrong", max_retries=0) as wrong:
        with pytest.raises(anthropic.AuthenticationError) as denied:
            wrong.messages.create(model="gpt-test", max_tokens=5, messages=HELLO)
    assert denied.value.body == _anthropic_error("authentication_error", "Incorrect API key provided.")
    upstream.clear()
    for stream in (False, True):
        with pytest.raises(anthropic.RateLimitError) as limited:
            claude.messages.create(model="rate-limited", max_tokens=5, messages=HELLO, stream=stream)
        assert limited.value.response.headers["retry-after"] == "7"
        assert limited.value.body == _anthropic_error("rate_limit_error", "Rate limit reached")
    assert len(upstream.received("mode-429")) == 2


def test_failure_after_the_stream_started_is_an_error_event(claude: anthropic.Anthropic) -> None:
    import anthropic
    kinds = []
    with pytest.raises(anthropic.APIStatusError, match="connection failed"):
        for event in claude.messages.create(model="midstream", max_tokens=5, messages=HELLO, stream=True):
            kinds.append(event.type)
    assert kinds[0] == "message_start" and "message_stop" not in kinds


def test_other_paths_keep_the_openai_error_shape(http: httpx.Client) -> None:
    response = http.post("/v1/chat/completions", json={"model": "no-such-model", "messages": HELLO})
    assert response.json()["error"]["code"] == "model_not_found"


def test_mixpr_switches_and_metrics(claude: anthropic.Anthropic, gateway_url: str) -> None:
    import anthropic
    text = haystack(120, seed=42) + "\n\n" + QUESTION  # ~2k tokens: fits, so only a switch compresses it
    raw = claude.messages.with_raw_response.create(
        model="gpt-test", max_tokens=16, messages=[{"role": "user", "content": text}],
        extra_headers={"x-mixpr-enabled": "true", "x-mixpr-budget-tokens": "300"})
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert int(raw.headers["x-mixpr-compressed-tokens"]) < 400
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="gpt-test", max_tokens=16, messages=HELLO,
                               extra_body={"mixpr": {"route": "sideways"}})
    assert caught.value.body == _anthropic_error("invalid_request_error",
                                                 "mixpr.route must be one of auto, heuristic, local, global.")
    metrics = httpx.get(gateway_url + "/metrics").text
    assert 'mixpr_requests_total{path="/v1/messages",status="200"}' in metrics
    assert 'mixpr_requests_total{path="/v1/messages",status="400"}' in metrics


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_becomes_a_thinking_block(claude: anthropic.Anthropic, stream: bool) -> None:
    if stream:
        with claude.messages.stream(model="thinker", max_tokens=64, messages=HELLO) as events:
            message = events.get_final_message()
    else:
        message = claude.messages.create(model="thinker", max_tokens=64, messages=HELLO)
    thinking, text = message.content
    assert (thinking.type, thinking.thinking) == ("thinking", REASONING_TEXT)
    assert (text.type, text.text) == ("text", REPLY_TEXT)
