"""Embeddings, legacy completions and models.retrieve through the openai SDK."""

from __future__ import annotations

import gc
import ssl

import httpx
import openai
import pytest
from conftest import MASTER_KEY, SMALL_WINDOW
from corpus import NEEDLE, QUESTION, haystack
from fake_upstream import REPLY_TEXT, FakeUpstream

from mixpr.tokens import count_tokens


def _sent(upstream: FakeUpstream, model: str, path: str) -> list[dict]:
    return [r.json for r in upstream.received(model) if r.path.endswith(path)]


def test_embeddings_round_trip(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = client.embeddings.with_raw_response.create(model="gpt-test", input=["hello", "world!"])
    result = raw.parse()
    # The SDK asks for base64 and decodes it: the fake's vectors are [len(text), index, 0.5].
    assert [d.embedding for d in result.data] == [[5.0, 0.0, 0.5], [6.0, 1.0, 0.5]]
    assert result.usage.prompt_tokens == 3
    assert raw.headers["x-mixpr-action"] == "passthrough"
    [sent] = _sent(upstream, "echo", "/embeddings")
    assert sent["input"] == ["hello", "world!"] and sent["encoding_format"] == "float"


def test_embeddings_are_never_compressed(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    document = haystack(600, seed=21)  # ~11k tokens; "small" has a 3k window
    result = client.embeddings.create(model="small", input=document, encoding_format="float",
                                      dimensions=3, extra_body={"user_tag": "kept"})
    assert result.data[0].embedding == [float(len(document)), 0.0, 0.5]
    [sent] = _sent(upstream, "small", "/embeddings")
    assert sent["input"] == document
    assert sent["dimensions"] == 3 and sent["user_tag"] == "kept"


@pytest.mark.parametrize("stream", [False, True])
def test_short_completion_is_forwarded_byte_for_byte(
    client: openai.OpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.clear()
    prompt = "Once upon a time,\n  there was "
    raw = client.completions.with_raw_response.create(model="gpt-test", prompt=prompt, max_tokens=7,
                                                      stop=["\n"], stream=stream)
    result = raw.parse()
    text = "".join(c.choices[0].text or "" for c in result) if stream else result.choices[0].text
    assert text == REPLY_TEXT
    assert raw.headers["x-mixpr-action"] == "passthrough"
    [sent] = _sent(upstream, "echo", "/completions")
    assert sent["prompt"] == prompt and sent["max_tokens"] == 7 and sent["stop"] == ["\n"]


@pytest.mark.parametrize("stream", [False, True])
def test_long_completion_prompt_arrives_compressed(
    client: openai.OpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.clear()
    prompt = haystack(600, seed=22) + "\n\n" + QUESTION
    raw = client.completions.with_raw_response.create(model="small", prompt=prompt, stream=stream)
    result = raw.parse()
    text = "".join(c.choices[0].text or "" for c in result) if stream else result.choices[0].text
    assert text == REPLY_TEXT
    [sent] = _sent(upstream, "small", "/completions")
    kept = sent["prompt"]
    assert kept.endswith(QUESTION) and NEEDLE in kept
    assert count_tokens(kept, "openai/small") + 1024 <= SMALL_WINDOW
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert int(raw.headers["x-mixpr-original-tokens"]) > 10_000


def test_list_prompt_is_forwarded_as_is(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    prompts = [haystack(600, seed=23), "second prompt"]
    raw = client.completions.with_raw_response.create(model="small", prompt=prompts)
    assert raw.headers["x-mixpr-action"] == "passthrough"
    [sent] = _sent(upstream, "small", "/completions")
    assert sent["prompt"] == prompts


def test_models_retrieve(client: openai.OpenAI) -> None:
    model = client.models.retrieve("small")
    assert (model.id, model.object, model.owned_by) == ("small", "model", "mixpr-gateway")
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no-such-model")
    assert caught.value.response.json() == {"error": {
        "message": "The model `no-such-model` does not exist on this gateway.",
        "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/embeddings", {"model": "gpt-test"}, "input"),
    ("/v1/embeddings", {"input": "x"}, "model"),
    ("/v1/completions", {"model": "gpt-test", "prompt": ""}, "prompt"),
    ("/v1/completions", {"model": "gpt-test", "prompt": "x", "stream": "yes"}, "stream"),
    ("/v1/completions", {"model": "gpt-test", "prompt": "x", "max_tokens": 0}, "max_tokens"),
])
def test_bad_bodies(http: httpx.Client, path: str, body: dict, param: str) -> None:
    response = http.post(path, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)


def test_errors_through_the_sdk(client: openai.OpenAI, gateway_url: str, upstream: FakeUpstream) -> None:
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-model", input="x")
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x")
    with openai.OpenAI(base_url=gateway_url + "/v1", api_key="sk-wrong", max_retries=0) as wrong:
        with pytest.raises(openai.AuthenticationError):
            wrong.embeddings.create(model="gpt-test", input="x")
        with pytest.raises(openai.AuthenticationError):
            wrong.models.retrieve("small")
    upstream.clear()
    for create in (lambda: client.embeddings.create(model="rate-limited", input="x"),
                   lambda: client.completions.create(model="rate-limited", prompt="x")):
        with pytest.raises(openai.RateLimitError) as caught:
            create()
        assert caught.value.response.headers["retry-after"] == "7"
        assert caught.value.response.json()["error"]["type"] == "rate_limit_error"
    assert [r.path for r in upstream.received("mode-429")] == ["/v1/embeddings", "/v1/completions"]


def test_metrics_label_each_endpoint(client: openai.OpenAI, gateway_url: str) -> None:
    client.embeddings.create(model="gpt-test", input="x")
    client.completions.create(model="gpt-test", prompt="x")
    client.models.retrieve("small")
    body = httpx.get(gateway_url + "/metrics", headers={"Authorization": f"Bearer {MASTER_KEY}"}).text
    for label in ('path="/v1/embeddings"', 'path="/v1/completions"', 'path="/v1/models/{model}"'):
        assert f"mixpr_requests_total{{{label},status=\"200\"}}" in body


def test_completions_leave_no_connection_open(
    client: openai.OpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(3):
        client.completions.create(model="gpt-test", prompt="x")
    gc.collect()  # an HTTP session nobody closed says so when it is collected
    assert not [r for r in caplog.records if "Unclosed" in r.getMessage()]


def test_a_legacy_completion_builds_no_tls_context_of_its_own(
        client: openai.OpenAI, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each call makes its own HTTP client (LiteLLM's would never be closed), and httpx built a TLS
    # context for each, 29 ms of CPU on the event loop. The tests' own clients share one (tests/tls.py):
    # undone here, as in a gateway's own process.
    for http_client in (httpx.Client, httpx.AsyncClient):
        monkeypatch.setattr(http_client, "__init__", http_client.__init__.__wrapped__)
    built: list[object] = []
    create = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: built.append(a) or create(*a, **k))
    upstream.clear()
    for _ in range(3):
        result = client.completions.create(model="gpt-test", prompt="Once upon a time", max_tokens=7)
        assert result.choices[0].text == REPLY_TEXT
    assert len(upstream.received("echo")) == 3
    assert len(built) <= 1  # the first call's, unless an earlier one built it
