"""Every error reaches the client as OpenAI error JSON with the right status."""

from __future__ import annotations

import json
import socket
import time

import httpx
import openai
import pytest
from conftest import MASTER_KEY, MAX_BODY_BYTES
from fake_upstream import FakeUpstream

HELLO = [{"role": "user", "content": "hello"}]


def _error(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _post(http: httpx.Client, body: object, **kwargs: object) -> httpx.Response:
    return http.post("/v1/chat/completions", json=body, **kwargs)


def test_missing_key(gateway_url: str) -> None:
    response = httpx.post(gateway_url + "/v1/chat/completions", json={"model": "gpt-test", "messages": HELLO})
    assert response.status_code == 401
    assert response.json() == _error("Missing API key: send 'Authorization: Bearer <key>'.",
                                     "authentication_error", code="invalid_api_key")


def test_wrong_key_through_the_openai_client(gateway_url: str) -> None:
    with openai.OpenAI(base_url=gateway_url + "/v1", api_key="sk-wrong", max_retries=0) as client:
        with pytest.raises(openai.AuthenticationError) as caught:
            client.chat.completions.create(model="gpt-test", messages=HELLO)
        with pytest.raises(openai.AuthenticationError):
            client.models.list()
    assert caught.value.status_code == 401
    assert caught.value.response.json() == _error("Incorrect API key provided.", "authentication_error",
                                                  code="invalid_api_key")


def test_unknown_model(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=HELLO)
    assert caught.value.response.json() == _error(
        "The model `no-such-model` does not exist on this gateway.", "invalid_request_error",
        param="model", code="model_not_found")


@pytest.mark.parametrize(("body", "expected"), [
    (b"{not json", _error("We could not parse the JSON body of your request.", "invalid_request_error")),
    (b"[1, 2]", _error("The request body must be a JSON object.", "invalid_request_error")),
    (b'{"messages": []}', _error("You must provide a model parameter.", "invalid_request_error", "model")),
    (b'{"model": "gpt-test", "messages": []}',
     _error("'messages' must be a non-empty array of message objects.", "invalid_request_error", "messages")),
    (b'{"model": "gpt-test", "messages": [{"content": "hi"}]}',
     _error("messages[0] must be an object with a string 'role'.", "invalid_request_error", "messages[0]")),
    (b'{"model": "gpt-test", "messages": [{"role": "user", "content": 5}]}',
     _error("messages[0].content must be a string, an array of parts or null.", "invalid_request_error",
            "messages[0].content")),
    (b'{"model": "gpt-test", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
     _error("'stream' must be a boolean.", "invalid_request_error", "stream")),
    (b'{"model": "gpt-test", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
     _error("'max_tokens' must be a positive integer.", "invalid_request_error", "max_tokens")),
    (b'{"model": "gpt-test", "messages": [{"role": "user", "content": "x"}], "mixpr": {"route": "sideways"}}',
     _error("mixpr.route must be one of auto, heuristic, local, global.", "invalid_request_error",
            "mixpr.route")),
    (b'{"model": "gpt-test", "messages": [{"role": "user", "content": "x"}], "mixpr": {"budget": 5}}',
     _error("Unknown mixpr option(s): budget; valid: enabled, route, budget_tokens.", "invalid_request_error",
            "mixpr.budget")),
])
def test_bad_requests(http: httpx.Client, body: bytes, expected: dict) -> None:
    response = http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert (response.status_code, response.json()) == (400, expected)


def test_bad_control_header(http: httpx.Client) -> None:
    headers = {"x-mixpr-budget-tokens": "lots"}
    response = _post(http, {"model": "gpt-test", "messages": HELLO}, headers=headers)
    assert response.status_code == 400
    assert response.json() == _error('mixpr.budget_tokens must be "auto" or an integer >= 16.',
                                     "invalid_request_error", "mixpr.budget_tokens")


def test_body_over_the_limit(http: httpx.Client, upstream: FakeUpstream) -> None:
    upstream.clear()
    huge = [{"role": "user", "content": "x" * (MAX_BODY_BYTES + 10)}]
    response = _post(http, {"model": "gpt-test", "messages": huge})
    assert response.status_code == 413
    assert response.json() == _error(
        f"The request body is larger than this gateway's limit of {MAX_BODY_BYTES} bytes "
        "(general_settings.max_body_bytes).", "invalid_request_error", code="request_too_large")
    assert upstream.received() == []


def test_body_over_the_limit_without_content_length(http: httpx.Client) -> None:
    # A chunked upload declares no length: the limit must hold while reading.
    head = b'{"model": "gpt-test", "messages": [{"role": "user", "content": "'
    chunks = (head, b"x" * (MAX_BODY_BYTES + 1), b'"}]}')
    headers = {"content-type": "application/json"}
    response = http.post("/v1/chat/completions", content=iter(chunks), headers=headers)
    assert response.status_code == 413


def test_rate_limit_keeps_retry_after(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="rate-limited", messages=HELLO)
    response = caught.value.response
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.json() == _error("Rate limit reached", "rate_limit_error", code="rate_limit_exceeded")
    assert len(upstream.received("mode-429")) == 1  # the gateway does not retry behind the client's back


def test_upstream_500(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="broken", messages=HELLO)
    assert caught.value.status_code == 500
    assert caught.value.response.json() == _error("The upstream broke", "server_error")


@pytest.mark.parametrize("model", ["dropper", "unreachable"])
def test_connection_failure_is_502(http: httpx.Client, model: str) -> None:
    response = _post(http, {"model": model, "messages": HELLO})
    assert response.status_code == 502
    assert response.json() == _error("Could not reach the upstream model (connection failed).", "api_error",
                                     code="upstream_connection_error")


@pytest.mark.parametrize("stream", [False, True])
def test_timeout_is_504(http: httpx.Client, stream: bool) -> None:
    response = _post(http, {"model": "slow", "messages": HELLO, "stream": stream})
    assert response.status_code == 504
    assert response.json() == _error("The upstream model did not answer in time.", "api_error",
                                     code="upstream_timeout")


def test_error_before_the_stream_starts_has_its_status(client: openai.OpenAI) -> None:
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="rate-limited", messages=HELLO, stream=True)


def test_error_after_the_stream_started_is_a_final_event(http: httpx.Client, client: openai.OpenAI) -> None:
    body = {"model": "midstream", "messages": HELLO, "stream": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        events = [e for e in response.read().decode().split("\n\n") if e]
    assert response.status_code == 200
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2][len("data: "):]) == _error(
        "Could not reach the upstream model (connection failed).", "api_error",
        code="upstream_connection_error")
    with pytest.raises(openai.APIError, match="connection failed"):
        for _ in client.chat.completions.create(model="midstream", messages=HELLO, stream=True):
            pass


def test_unknown_route_is_openai_json(http: httpx.Client) -> None:
    response = http.get("/v1/nothing-here")
    assert (response.status_code, response.json()) == (404, _error("Not Found", "invalid_request_error"))


def test_client_hanging_up_mid_body_is_not_a_server_error(gateway_url: str, http: httpx.Client,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A client that disconnects before its whole body arrived is counted as 499, never as a 500."""
    port = int(gateway_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: [::1]\r\n"
                     b"Content-Type: application/json\r\n"
                     b"Authorization: Bearer " + MASTER_KEY.encode() + b"\r\nContent-Length: 100000\r\n\r\n"
                     b'{"model": "gpt-test", "messages": [')
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        metrics = http.get("/metrics").text
        if 'path="/v1/chat/completions",status="499"' in metrics:
            break
        time.sleep(0.05)
    assert 'path="/v1/chat/completions",status="499"' in metrics
    assert not any("unexpected error" in r.getMessage() for r in caplog.records)
