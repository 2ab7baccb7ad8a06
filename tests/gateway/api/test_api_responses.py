"""The Responses API through the openai SDK, served by a chat-completions upstream."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from conftest import SMALL_WINDOW
from corpus import NEEDLE, QUESTION, haystack
from fake_upstream import REASONING_TEXT, REPLY_TEXT, TOOL_ARGUMENTS, TOOL_CALL_ID, FakeUpstream

from mixpr.tokens import count_tokens

INSTRUCTIONS = "You answer questions about the document the user sends."
TOOLS = [{"type": "function", "name": "search", "description": "Search the archive.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]


def _chat_requests(upstream: FakeUpstream, model: str) -> list[dict]:
    return [r.json for r in upstream.received(model) if r.path.endswith("/chat/completions")]


def _events(stream: openai.Stream) -> list:
    return list(stream)


def test_short_input_is_forwarded_as_chat(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = client.responses.with_raw_response.create(model="gpt-test", input="Hi there!  ",
                                                    instructions=INSTRUCTIONS, max_output_tokens=40,
                                                    temperature=0.3)
    response = raw.parse()
    assert response.output_text == REPLY_TEXT
    assert response.status == "completed" and response.object == "response"
    assert response.instructions == INSTRUCTIONS and response.max_output_tokens == 40
    assert (response.usage.input_tokens, response.usage.output_tokens) == (10, 5)
    assert raw.headers["x-mixpr-action"] == "passthrough"
    [sent] = _chat_requests(upstream, "echo")
    assert sent["messages"] == [{"role": "system", "content": INSTRUCTIONS},
                                {"role": "user", "content": "Hi there!  "}]
    assert sent["max_tokens"] == 40 and sent["temperature"] == 0.3


@pytest.mark.parametrize("stream", [False, True])
def test_long_input_arrives_compressed(client: openai.OpenAI, upstream: FakeUpstream, stream: bool) -> None:
    upstream.clear()
    document = haystack(600, seed=31)
    items = [{"role": "developer", "content": "Quote codes exactly."},
             {"role": "user", "content": [{"type": "input_text", "text": document + "\n\n" + QUESTION}]}]
    raw = client.responses.with_raw_response.create(model="small", input=items, instructions=INSTRUCTIONS,
                                                    stream=stream)
    result = raw.parse()
    if stream:
        events = _events(result)
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert events[-1].type == "response.completed"
        assert events[-1].response.output[0].content[0].text == text
    else:
        text = result.output_text
    assert text == REPLY_TEXT
    [sent] = _chat_requests(upstream, "small")
    system, developer, user = sent["messages"]
    assert system == {"role": "system", "content": INSTRUCTIONS}
    # LiteLLM sends developer messages as system messages to servers it does not know: verbatim either way.
    assert developer["content"] == "Quote codes exactly." and developer["role"] in ("developer", "system")
    kept = user["content"][0]["text"]
    assert kept.endswith(QUESTION) and NEEDLE in kept
    assert count_tokens(kept, "openai/small") + 1024 < SMALL_WINDOW
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert int(raw.headers["x-mixpr-original-tokens"]) > 10_000


def test_streamed_events_parse_into_a_final_response(client: openai.OpenAI) -> None:
    with client.responses.stream(model="gpt-test", input="hello") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert final.output_text == REPLY_TEXT and final.status == "completed"


@pytest.mark.parametrize("stream", [False, True])
def test_function_call_round_trip(client: openai.OpenAI, upstream: FakeUpstream, stream: bool) -> None:
    upstream.clear()
    question = {"role": "user", "content": "Find the vault code."}
    if stream:
        with client.responses.stream(model="tool-user", input=[question], tools=TOOLS) as events:
            deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
            response = events.get_final_response()
        assert "".join(deltas) == TOOL_ARGUMENTS and len(deltas) == 2
    else:
        response = client.responses.create(model="tool-user", input=[question], tools=TOOLS)
    [call] = response.output
    assert (call.type, call.name, call.call_id, call.arguments) == (
        "function_call", "search", TOOL_CALL_ID, TOOL_ARGUMENTS)
    [first] = _chat_requests(upstream, "mode-tool")
    assert first["tools"][0]["function"]["name"] == "search"
    # The client runs the tool and sends the call and its output back: both keep their structure.
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "amber-falcon-427"}
    echoed = {"type": "function_call", "call_id": call.call_id, "name": call.name,
              "arguments": call.arguments}
    client.responses.create(model="gpt-test", input=[question, echoed, result], tools=TOOLS)
    [second] = _chat_requests(upstream, "echo")
    [tool_call] = second["messages"][1]["tool_calls"]
    assert tool_call["id"] == TOOL_CALL_ID
    assert tool_call["function"] == {"name": "search", "arguments": TOOL_ARGUMENTS}
    assert second["messages"][2] == {"role": "tool", "content": "amber-falcon-427",
                                     "tool_call_id": TOOL_CALL_ID}


def test_images_pass_through(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    parts = [{"type": "input_text", "text": "What is in this picture?"},
             {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "low"}]
    client.responses.create(model="gpt-test", input=[{"role": "user", "content": parts}])
    [sent] = _chat_requests(upstream, "echo")
    assert sent["messages"][0]["content"][1] == {
        "type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}}


@pytest.mark.parametrize(("field", "value"), [
    ("previous_response_id", "resp_123"), ("store", True), ("conversation", "conv_1"), ("background", True),
])
def test_server_side_state_is_refused(client: openai.OpenAI, upstream: FakeUpstream, field: str,
                                      value: object) -> None:
    upstream.clear()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-test", input="hi", extra_body={field: value})
    error = caught.value.response.json()["error"]
    assert error["param"] == field and "gateway" in error["message"]
    assert upstream.received() == []


def test_store_false_is_accepted(client: openai.OpenAI) -> None:
    assert client.responses.create(model="gpt-test", input="hi", store=False).output_text == REPLY_TEXT


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "gpt-test"}, "input"),
    ({"model": "gpt-test", "input": []}, "input"),
    ({"model": "gpt-test", "input": ["not an item"]}, "input"),
    ({"input": "hi"}, "model"),
    ({"model": "gpt-test", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "gpt-test", "input": "hi", "stream": "yes"}, "stream"),
])
def test_bad_bodies(http: httpx.Client, body: dict, param: str) -> None:
    response = http.post("/v1/responses", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)


def test_errors_in_openai_shape(client: openai.OpenAI, gateway_url: str) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="no-such-model", input="hi")
    assert caught.value.response.json()["error"]["code"] == "model_not_found"
    with openai.OpenAI(base_url=gateway_url + "/v1", api_key="sk-wrong", max_retries=0) as wrong:
        with pytest.raises(openai.AuthenticationError):
            wrong.responses.create(model="gpt-test", input="hi")
    for stream in (False, True):
        with pytest.raises(openai.RateLimitError) as limited:
            client.responses.create(model="rate-limited", input="hi", stream=stream)
        assert limited.value.response.headers["retry-after"] == "7"


def test_failure_after_the_stream_started_is_an_error_event(http: httpx.Client) -> None:
    body = {"model": "midstream", "input": "hi", "stream": True}
    with http.stream("POST", "/v1/responses", json=body) as response:
        events = [e for e in response.read().decode().split("\n\n") if e]
    assert response.status_code == 200
    kinds = [e.split("\n")[0] for e in events]
    assert kinds[0] == "event: response.created" and kinds[-1] == "event: error"
    error = json.loads(events[-1].split("\n", 1)[1][len("data: "):])
    assert (error["type"], error["code"]) == ("error", "upstream_connection_error")
    assert "event: response.completed" not in kinds


def test_mixpr_switches_and_metrics(client: openai.OpenAI, gateway_url: str) -> None:
    text = haystack(120, seed=32) + "\n\n" + QUESTION  # ~2k tokens: fits, so only a switch compresses it
    raw = client.responses.with_raw_response.create(
        model="gpt-test", input=text, extra_body={"mixpr": {"enabled": True, "budget_tokens": 300}})
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert int(raw.headers["x-mixpr-compressed-tokens"]) < 400
    raw = client.responses.with_raw_response.create(model="gpt-test", input=text,
                                                    extra_headers={"x-mixpr-enabled": "false"})
    assert raw.headers["x-mixpr-action"] == "passthrough"
    metrics = httpx.get(gateway_url + "/metrics").text
    assert 'mixpr_requests_total{path="/v1/responses",status="200"}' in metrics


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_becomes_a_reasoning_item(client: openai.OpenAI, stream: bool) -> None:
    if stream:
        with client.responses.stream(model="thinker", input="hello") as events:
            deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
            response = events.get_final_response()
        assert "".join(deltas) == REASONING_TEXT
    else:
        response = client.responses.create(model="thinker", input="hello")
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == REASONING_TEXT
    assert message.type == "message" and response.output_text == REPLY_TEXT
