"""Provider errors reach the client with their own status and message; a client that hangs up
mid-stream stops the upstream generation."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from fake_upstream import FakeUpstream

HELLO = [{"role": "user", "content": "hello"}]


def _error(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


REFUSALS = {
    "refuses-400": (400, _error("The upstream refused this request (400).", "invalid_request_error",
                                "messages", "upstream_400")),
    "refuses-404": (404, _error("The upstream refused this request (404).", "invalid_request_error",
                                "messages", "upstream_404")),
    "refuses-422": (422, _error("Invalid request: messages.0.role: Input should be 'user'",
                                "invalid_request_error", "messages.0.role")),
    "llama-invalid": (400, _error("Invalid request: messages.0.content: Input should be a valid list",
                                  "invalid_request_error", "messages.0.content")),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", sorted(REFUSALS))
def test_upstream_validation_errors_keep_their_status_and_message(
    http: httpx.Client, model: str, stream: bool
) -> None:
    response = http.post("/v1/chat/completions", json={"model": model, "messages": HELLO, "stream": stream})
    assert (response.status_code, response.json()) == REFUSALS[model]


def test_the_openai_client_sees_the_upstream_refusal(client: openai.OpenAI) -> None:
    with pytest.raises(openai.UnprocessableEntityError, match="Input should be 'user'"):
        client.chat.completions.create(model="refuses-422", messages=HELLO)
    with pytest.raises(openai.NotFoundError, match=r"refused this request \(404\)"):
        client.chat.completions.create(model="refuses-404", messages=HELLO, stream=True)


def test_an_unknown_role_is_refused_by_the_gateway(http: httpx.Client, upstream: FakeUpstream) -> None:
    upstream.clear()
    body = {"model": "gpt-test", "messages": [{"role": "wizard", "content": "abracadabra"}]}
    response = http.post("/v1/chat/completions", json=body)
    assert (response.status_code, response.json()) == (400, _error(
        "messages[0].role must be one of system, developer, user, assistant, tool, function.",
        "invalid_request_error", "messages[0].role"))
    assert upstream.received() == []


@pytest.mark.parametrize(("model", "upstream_model"),
                         [("trickle", "mode-slowstream"), ("stall", "mode-stall")])
def test_a_client_hanging_up_mid_stream_closes_the_upstream_connection(
    gateway_url: str, upstream: FakeUpstream, model: str, upstream_model: str
) -> None:
    # "stall" sends nothing after its first chunk, so the gateway never writes and must notice the
    # disconnect itself rather than through a failed write.
    marker = f"hang-up-{time.monotonic()}"
    body = {"model": model, "messages": [{"role": "user", "content": marker}], "stream": True}
    headers = {"Authorization": "Bearer sk-gateway-test"}
    with httpx.Client(base_url=gateway_url, headers=headers, timeout=10) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            first = next(response.iter_lines())
            assert json.loads(first[len("data: "):])["object"] == "chat.completion.chunk"
            hung_up = time.monotonic()
    [seen] = [r for r in upstream.received(upstream_model) if marker in r.raw_body.decode()]
    deadline = time.monotonic() + 5
    while seen.closed_at is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen.closed_at is not None, "the upstream kept generating after the client left"
    assert seen.closed_at - hung_up < 2.0


def test_litellm_failing_on_its_own_is_not_a_connection_error() -> None:
    # LiteLLM wraps its own AttributeError (a message part it did not expect) in APIConnectionError;
    # blaming the network (502) would send operators after the wrong thing.
    import litellm

    from gateway.upstream.forward import map_error

    try:
        try:
            raise AttributeError("'int' object has no attribute 'get'")
        except AttributeError as bug:
            raise litellm.APIConnectionError("OpenAIException - 'int' object has no attribute 'get'",
                                             llm_provider="openai", model="echo") from bug
    except litellm.APIConnectionError as wrapped:
        assert (map_error(wrapped).status_code, map_error(wrapped).code) == (500, None)


def test_a_user_content_part_litellm_refuses_is_a_400(http: httpx.Client, upstream: FakeUpstream) -> None:
    upstream.clear()
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": [{"type": "bogus"}]}]}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[0].content[0].type"
    assert response.json()["error"]["message"].startswith("messages[0].content[0].type must be one of text, ")
    assert upstream.received() == []
