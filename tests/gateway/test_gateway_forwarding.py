"""Below the trigger the gateway is invisible: the upstream gets what the client sent."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from conftest import UPSTREAM_KEY
from corpus import QUESTION, haystack
from fake_upstream import REPLY_TEXT, FakeUpstream
from prometheus_client.parser import text_string_to_metric_families

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
    ], "name": "alice"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": \"cat\"}"}},
    ]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"result\": \"a cat on a mat\"}"},
    {"role": "user", "content": "And its colour?"},
]
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a thing up", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
PARAMS = {
    "temperature": 0.3, "top_p": 0.9, "stop": ["\n\n"], "n": 1, "seed": 7, "user": "user-42",
    "logprobs": True, "top_logprobs": 2, "presence_penalty": 0.1, "frequency_penalty": 0.2,
    "max_tokens": 50, "tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": False,
    "response_format": {"type": "text"}, "logit_bias": {"1234": -5},
}


def _without_nulls(messages: list[dict]) -> list[dict]:
    """What LiteLLM sends for every provider: message fields whose value is null are left out
    (``validate_and_fix_openai_messages``); OpenAI treats a null and an absent field alike."""
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


def _only(upstream: FakeUpstream, model: str) -> dict:
    [request] = upstream.received(model)
    return request


def test_passthrough_reaches_upstream_unchanged(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-test", messages=MESSAGES, extra_body={"custom_field": {"keep": [1, 2]}}, **PARAMS
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == REPLY_TEXT
    request = _only(upstream, "echo")
    body = request.json
    # Byte-for-byte: the same JSON text for the messages, key order included.
    assert json.dumps(body["messages"]) == json.dumps(_without_nulls(MESSAGES))
    assert {k: body[k] for k in PARAMS} == PARAMS
    assert body["custom_field"] == {"keep": [1, 2]}
    assert "mixpr" not in body
    assert request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"  # the gateway's own key stays here
    assert raw.headers["x-mixpr-action"] == "passthrough"
    assert raw.headers["x-mixpr-route"] == "none"
    assert raw.headers["x-mixpr-compress-ms"] == "0"
    assert int(raw.headers["x-mixpr-original-tokens"]) == int(raw.headers["x-mixpr-compressed-tokens"]) > 0


def test_mixpr_field_and_headers_are_not_forwarded(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    messages = [{"role": "user", "content": "hello"}]
    client.chat.completions.create(model="gpt-test", messages=messages,
                                   extra_body={"mixpr": {"enabled": False}},
                                   extra_headers={"x-mixpr-route": "local"})
    request = _only(upstream, "echo")
    # The gateway's own prompt_cache_key aside (gateway.core.cache_key), exactly the client's request.
    sent = request.json
    assert sent.pop("prompt_cache_key").startswith("mixpr-")
    assert sent == {"messages": messages, "model": "echo"}
    assert not [h for h in request.headers if h.startswith("x-mixpr")]


def test_streaming_passthrough(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    stream = client.chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True, stream_options={"include_usage": True}, seed=3
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == REPLY_TEXT
    body = _only(upstream, "echo").json
    assert json.dumps(body["messages"]) == json.dumps(_without_nulls(MESSAGES))
    assert body["stream"] is True and body["seed"] == 3
    assert body["stream_options"] == {"include_usage": True}


def test_stream_is_sse_ending_with_done(http: httpx.Client) -> None:
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        raw = response.read().decode()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-mixpr-action"] == "passthrough"
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[0][6:])["object"] == "chat.completion.chunk"


def test_models_lists_configured_names(client: openai.OpenAI) -> None:
    names = [m.id for m in client.models.list()]
    assert names[:3] == ["gpt-test", "small", "rate-limited"]


def test_health_endpoints(gateway_url: str) -> None:
    assert httpx.get(gateway_url + "/health/liveliness").json() == {"status": "alive"}
    ready = httpx.get(gateway_url + "/health/readiness")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})


def _scrape(gateway_url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of ``/metrics``, by name and labels (what a Prometheus server stores)."""
    text = httpx.get(gateway_url + "/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_requests_and_tokens(client: openai.OpenAI, gateway_url: str) -> None:
    """The session's gateway is shared, so each counter is read before and after this test's requests."""
    long_prompt = haystack(600, seed=31) + "\n\n" + QUESTION  # about 11k tokens; "small" holds 3k
    before = _scrape(gateway_url)
    client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "count me"}])
    raw = client.chat.completions.with_raw_response.create(
        model="small", messages=[{"role": "user", "content": long_prompt}])
    after = _scrape(gateway_url)

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    original, compressed = (int(raw.headers[f"x-mixpr-{h}-tokens"]) for h in ("original", "compressed"))
    assert grew("mixpr_requests_total", path="/v1/chat/completions", status="200") == 2
    assert grew("mixpr_chat_requests_total", action="passthrough", model="gpt-test") == 1
    assert grew("mixpr_chat_requests_total", action="compressed", model="small") == 1
    assert grew("mixpr_prompt_tokens_in_total", model="small") == original
    assert grew("mixpr_prompt_tokens_out_total", model="small") == compressed
    assert grew("mixpr_prompt_tokens_saved_total", model="small") == original - compressed > 8000
    assert grew("mixpr_compression_seconds_count", model="small") == 1
    seconds = grew("mixpr_compression_seconds_sum", model="small")
    assert seconds == pytest.approx(float(raw.headers["x-mixpr-compress-ms"]) / 1000, abs=0.001)
