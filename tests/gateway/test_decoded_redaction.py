"""Issue 57: redaction acts on decoded values at every exit, and an error is what it says whatever
the status. Every relay (chat, Responses, Anthropic Messages, compact) and LiteLLM's path, in front
of an upstream scripted per test (``answering_upstream``): the secret put after a JSON escape (``\\n``,
Go's ``\\u003c``), in error shapes that are not OpenAI's (TGI's ``{"error": "<text>"}``,
``{"errors": [...]}``), in 2xx bodies that are errors, in stream events without an event type, and
in nested config values (``extra_headers``), never reaches the client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from answering_upstream import Answer, AnsweringUpstream, json_answer, sse_answer
from conftest import MASTER_KEY, ServerThread
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway import create_app
from gateway.config import parse_config

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
KEY = "sk-live-0042-operator-secret"
TENANT = "tnt-live-7f3a9c2e41"  # LiteLLM's usual custom auth header, in extra_headers
BILLING = "billing-ref-0091-acme"  # a value buried in extra_body
ANTHROPIC_KEY = "sk-ant-operator-0042-secret"
# alias -> (upstream model, extra settings): no alias holds a byte of an upstream name
CHAT, RESP, ANTH, TENANTED = "acme-chat-v3", "acme-resp-v3", "acme-anth-v3", "acme-tenant-v3"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def scripted() -> Iterator[AnsweringUpstream]:
    server = AnsweringUpstream().start()
    yield server
    server.stop()


def _config(base: str) -> dict[str, Any]:
    def openai(name: str, model: str, **params: Any) -> dict[str, Any]:
        return {"model_name": name, "litellm_params": {"model": f"openai/{model}", "api_base": base,
                                                       "api_key": KEY, **params}}

    models = [openai("c", CHAT), {**openai("r", RESP), "model_info": {"responses_api": True}},
              openai("t", TENANTED, extra_headers={"x-tenant-token": TENANT},
                     extra_body={"metadata": {"billing": [BILLING]}}),
              {"model_name": "a", "litellm_params": {"model": f"anthropic/{ANTH}", "api_key": ANTHROPIC_KEY,
                                                     "api_base": base.removesuffix("/v1")}}]
    # Nothing here is long enough to compress: MixPR in a thread, so no fork server imports it and LiteLLM.
    return {"model_list": models,
            "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread"}}


@pytest.fixture(scope="module")
def url(scripted: AnsweringUpstream) -> Iterator[str]:
    server = ServerThread(create_app(parse_config(_config(scripted.base_url)))).start()
    yield server.url
    server.stop()


def _secrets(scripted: AnsweringUpstream) -> list[str]:
    return [KEY, KEY[3:], TENANT, BILLING, ANTHROPIC_KEY, f"127.0.0.1:{scripted.port}", CHAT, RESP, ANTH,
            TENANTED]


def _leaks(response: httpx.Response, scripted: AnsweringUpstream) -> list[str]:
    seen = (response.text + " " + " ".join(f"{k}: {v}" for k, v in response.headers.items())).lower()
    return [s for s in _secrets(scripted) if s.lower() in seen]


def _said(scripted: AnsweringUpstream, model: str, escape: str = "\n") -> str:
    """What a careless upstream says: every operator value, each right after ``escape``."""
    return escape.join(["could not load", KEY, f"127.0.0.1:{scripted.port}", model, "retry later"])


ROUTES = {
    "chat": ("c", CHAT, "/v1/chat/completions", {"messages": HELLO}),
    "chat stream": ("c", CHAT, "/v1/chat/completions", {"messages": HELLO, "stream": True}),
    "litellm": ("t", TENANTED, "/v1/chat/completions", {"messages": HELLO}),
    "litellm responses": ("t", TENANTED, "/v1/responses", {"input": "hello"}),
    "embeddings": ("t", TENANTED, "/v1/embeddings", {"input": "hello"}),
    "responses over chat": ("c", CHAT, "/v1/responses", {"input": "hello"}),
    "responses": ("r", RESP, "/v1/responses", {"input": "hello"}),
    "responses stream": ("r", RESP, "/v1/responses", {"input": "hello", "stream": True}),
    "compact": ("c", CHAT, "/v1/responses/compact", {"input": HELLO}),
    "messages": ("a", ANTH, "/v1/messages", {"messages": HELLO, "max_tokens": 16}),
    "messages stream": ("a", ANTH, "/v1/messages", {"messages": HELLO, "max_tokens": 16, "stream": True}),
}


def _ask(url: str, route: str) -> httpx.Response:
    alias, _, path, body = ROUTES[route]
    return httpx.post(url + path, json={"model": alias, **body}, headers=AUTH, timeout=60)


# -- defect 5: error bodies not in OpenAI's shape, never formatted through repr ------------------------

NOT_OPENAI = {
    "tgi": lambda said: {"error": said},
    "errors list": lambda said: {"errors": [{"message": said}]},
    "message only": lambda said: {"message": said, "status": "bad"},
}


@pytest.mark.parametrize("shape", sorted(NOT_OPENAI))
@pytest.mark.parametrize("route", ["chat", "chat stream", "responses", "responses stream", "compact",
                                   "responses over chat", "litellm", "litellm responses", "embeddings"])
def test_an_error_body_in_any_shape_loses_what_follows_an_escape(url: str, scripted: AnsweringUpstream,
                                                                 route: str, shape: str) -> None:
    model = ROUTES[route][1]
    scripted.script(model, json_answer(500, NOT_OPENAI[shape](_said(scripted, model))))
    response = _ask(url, route)
    assert response.status_code == 500, response.text
    assert not _leaks(response, scripted), response.text
    assert "could not load" in response.text  # what the upstream said, but for the operator's values


# -- defect 6 and the credential variables: nested config values and LiteLLM's own variables ---------

@pytest.mark.parametrize("route", ["litellm", "litellm responses", "embeddings"])
def test_a_tenant_token_in_extra_headers_never_reaches_the_client(url: str, scripted: AnsweringUpstream,
                                                                  route: str) -> None:
    """``x-tenant-token`` in ``litellm_params.extra_headers``, quoted back by the upstream."""
    scripted.script(TENANTED, json_answer(500, {"error": {"message": f"tenant {TENANT} over quota",
                                                          "type": "server_error"}}))
    response = _ask(url, route)
    assert response.status_code == 500, response.text
    assert TENANT not in response.text and "over quota" in response.text, response.text


def test_every_nested_string_of_litellm_params_is_known() -> None:
    from gateway.upstream.redaction import Redactor

    entry = {"model_name": "m", "litellm_params": {
        "model": "openai/x", "headers": {"X-Org-Secret": "org-9f8e7d6c", "content-type": "application/json"},
        "default_headers": {"x-route": "blue-team-route"},
        "extra_body": {"metadata": {"tenant": "tenant-4471-acme", "tags": ["billing-ref-0091"]},
                       "reasoning_effort": "medium", "proxy_url": "http://egress.corp.example:3128"}}}
    known = Redactor.from_config(parse_config({"model_list": [entry]}), environ={})
    text = ("org-9f8e7d6c blue-team-route tenant-4471-acme billing-ref-0091 egress.corp.example "
            "medium effort, application/json")
    out = known(text)
    for secret in ("org-9f8e7d6c", "blue-team-route", "tenant-4471-acme", "billing-ref-0091", "corp.example"):
        assert secret not in out, out
    assert out.endswith("medium effort, application/json")  # a plain word and a protocol value stay


def test_litellms_credential_variables_and_the_proxy_host_are_known() -> None:
    from gateway.upstream.redaction import Redactor

    environ = {"AWS_BEARER_TOKEN_BEDROCK": "ABSKQmVkcm9ja0FQSUtleS1zecret",
               "HTTPS_PROXY": "http://squid:pr0xypass@egress.corp.example:3128",
               "NO_PROXY": "localhost", "TOKENIZERS_PARALLELISM": "false-ish-value"}
    config = parse_config({"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/x"}}]})
    known = Redactor.from_config(config, environ=environ)
    out = known("bedrock said ABSKQmVkcm9ja0FQSUtleS1zecret via egress.corp.example:3128 (pr0xypass); "
                "false-ish-value stays")
    for secret in ("ABSKQmVkcm9ja0FQSUtleS1zecret", "corp.example", "pr0xypass"):
        assert secret not in out, out
    assert out.endswith("false-ish-value stays")


# -- defect 4: relayed Responses streams ------------------------------------------------------------

def _event(kind: str | None, payload: dict[str, Any]) -> bytes:
    head = f"event: {kind}\n".encode() if kind else b""
    return head + b"data: " + json.dumps(payload).encode() + b"\n\n"


CREATED = _event("response.created", {"type": "response.created", "sequence_number": 0,
                                       "response": {"id": "resp_1", "status": "in_progress", "output": []}})


@pytest.mark.parametrize("escape", ["\n", "\t", "<", "\\", '"'])
def test_a_value_after_a_json_escape_in_an_error_event_is_redacted(url: str, scripted: AnsweringUpstream,
                                                                   escape: str) -> None:
    """``"...loaded:\\nsk-..."``: on the raw SSE text the redactor saw the ``n`` of ``\\n`` before
    the key; Go's encoder writes ``<`` as ``\\u003c``, which hid it the same way."""
    said = _said(scripted, RESP, escape)
    error = {"type": "error", "sequence_number": 1, "code": "server_error", "message": said, "param": None}
    raw = _event("error", error).replace(b"<", b"\\u003c")
    scripted.script(RESP, sse_answer(CREATED, raw))
    response = _ask(url, "responses stream")
    assert response.status_code == 200 and "event: error" in response.text, response.text
    assert not _leaks(response, scripted), response.text
    assert "could not load" in response.text


def test_an_untyped_error_event_is_the_apis_error_event(url: str, scripted: AnsweringUpstream) -> None:
    """vLLM's mid-stream ``data: {"error": {...}}``, without an event type."""
    error = {"message": _said(scripted, RESP), "type": "server_error", "code": "overloaded"}
    scripted.script(RESP, sse_answer(CREATED, b"data: " + json.dumps({"error": error}).encode() + b"\n\n"))
    response = _ask(url, "responses stream")
    assert not _leaks(response, scripted), response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["response.created", "error"], response.text
    assert events[-1]["sequence_number"] == 1 and events[-1]["code"] == "overloaded"
    assert events[-1]["message"].startswith("could not load")


def test_the_gateways_error_event_counts_no_comments(url: str, scripted: AnsweringUpstream) -> None:
    """An upstream that ends early after keep-alive comments: the gateway's ``error`` event follows
    the upstream's numbering (one event: number 1), not the comments'."""
    scripted.script(RESP, sse_answer(b": keep-alive\n\n", CREATED, b": keep-alive\n\n: keep-alive\n\n"))
    response = _ask(url, "responses stream")
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["response.created", "error"], response.text
    assert events[-1]["sequence_number"] == 1, events[-1]


# -- defects 2 and 3: an error is what it says, whatever the status ----------------------------------

def _openrouter_error(scripted: AnsweringUpstream, model: str) -> dict[str, Any]:
    return {"error": {"code": 502, "message": _said(scripted, model), "metadata": {"provider_name": "acme"}}}


@pytest.mark.parametrize("route", ["chat", "responses over chat", "compact", "responses", "litellm"])
def test_a_200_whose_body_is_an_error_leaves_by_the_one_exit(url: str, scripted: AnsweringUpstream,
                                                             route: str) -> None:
    """OpenRouter's documented 200 with ``{"error": ...}`` once a model has started: the relays
    answer as LiteLLM's path does, a redacted 502 in OpenAI's shape (never an empty ``completed``)."""
    model = ROUTES[route][1]
    scripted.script(model, json_answer(200, _openrouter_error(scripted, model)))
    response = _ask(url, route)
    assert response.status_code == 502, response.text
    assert not _leaks(response, scripted), response.text
    assert "could not load" in response.json()["error"]["message"], response.text


def test_an_anthropic_200_that_is_an_error_is_anthropics_502(url: str, scripted: AnsweringUpstream) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": _said(scripted, ANTH)}}
    scripted.script(ANTH, json_answer(200, error))
    response = _ask(url, "messages")
    assert response.status_code == 502, response.text
    assert not _leaks(response, scripted), response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error", body
    assert body["error"]["message"].startswith("could not load")


def test_a_failed_response_at_200_leaves_by_the_one_exit(url: str, scripted: AnsweringUpstream) -> None:
    """A non-streamed Response with ``status: "failed"`` quotes the key, the host and the model in its
    ``error.message``; streamed, the same object (``response.failed``) was already redacted."""
    failed = {"id": "resp_1", "object": "response", "status": "failed", "model": RESP, "output": [],
              "error": {"code": "server_error", "message": _said(scripted, RESP)}}
    scripted.script(RESP, json_answer(200, failed))
    response = _ask(url, "responses")
    assert response.status_code == 502, response.text
    assert not _leaks(response, scripted), response.text
    assert response.json()["error"]["code"] == "server_error"


def test_a_non_json_200_on_the_responses_relay_is_a_502(url: str, scripted: AnsweringUpstream) -> None:
    scripted.script(RESP, Answer(200, f"<html>{_said(scripted, RESP)}</html>".encode(), "text/html"))
    response = _ask(url, "responses")
    assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_invalid_response"
    assert not _leaks(response, scripted), response.text


# -- the property: any route, any status, any error shape, the value after any escape ----------------

ESCAPES = ["\n", "\r", "\t", "\b", "\f", "\\", '"', "/", "<", ">", "&", "\u2028", "\x7f", "\x00", "é", " "]


def _sse(*payloads: tuple[str | None, dict[str, Any]]) -> bytes:
    return b"".join(_event(kind, payload) for kind, payload in payloads)


SHAPES = {
    "openai": lambda said: json.dumps({"error": {"message": said, "type": "server_error", "code": None}}),
    "tgi": lambda said: json.dumps({"error": said}),
    "errors": lambda said: json.dumps({"errors": [{"message": said}, {"message": said}]}),
    "detail": lambda said: json.dumps({"detail": said}),
    "anthropic": lambda said: json.dumps({"type": "error", "error": {"type": "api_error", "message": said}}),
    "failed": lambda said: json.dumps({"object": "response", "status": "failed",
                                       "error": {"code": "server_error", "message": said}}),
    "go": lambda said: json.dumps({"error": said}).replace("<", "\\u003c").replace(">", "\\u003e"),
    "text": lambda said: said,
    "sse typed": lambda said: _sse(("error", {"type": "error", "message": said})).decode(),
    "sse untyped": lambda said: _sse((None, {"error": {"message": said}})).decode(),
    "sse anthropic": lambda said: _sse(("error", {"type": "error", "error": {"type": "x", "message": said}})
                                       ).decode(),
    "sse failed": lambda said: _sse(("response.failed", {"type": "response.failed", "response": {
        "status": "failed", "error": {"code": "server_error", "message": said}}})).decode(),
}
PROPERTY_ROUTES = sorted(ROUTES)
STATUSES = [200, 201, 400, 404, 409, 422, 429, 500, 502, 503, 529]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(PROPERTY_ROUTES), status=st.sampled_from(STATUSES),
       shape=st.sampled_from(sorted(SHAPES)), before=st.sampled_from(ESCAPES), after=st.sampled_from(ESCAPES),
       secret=st.integers(0, 8))
# Found by the property: a 200 failed Response on embeddings, whose error code LiteLLM makes the status
@example(route="embeddings", status=200, shape="failed", before="\n", after="\n", secret=0)
def test_no_answer_carries_an_operators_value(url: str, scripted: AnsweringUpstream, route: str, status: int,
                                              shape: str, before: str, after: str, secret: int) -> None:
    """Whatever the route, the status and the shape of an upstream's error, a configured secret, host
    or upstream model name right after (and before) any JSON escape never reaches the client; the
    gateway answers in the API's shape, never with its own internal error."""
    model = ROUTES[route][1]
    value = [v for v in _secrets(scripted) if v != KEY[3:]][secret]  # the tail is checked, not said
    said = f"worker failed{before}{value}{after}retry later"
    content_type = "text/event-stream" if shape.startswith("sse") else (
        "text/plain" if shape == "text" else "application/json")
    scripted.script(model, Answer(status, SHAPES[shape](said).encode(), content_type))
    response = _ask(url, route)
    assert not _leaks(response, scripted), (response.status_code, response.text)
    assert "internal error" not in response.text, response.text


def test_two_aliases_of_one_upstream_model_never_name_each_other() -> None:
    """``fast`` and ``cheap`` both route to ``acme-shared-v1``: an upstream's text naming it must not
    tell ``fast``'s client about ``cheap`` (the last alias read used to win for both)."""
    from gateway.upstream.redaction import Redactor

    models = [{"model_name": alias, "litellm_params": {"model": "openai/acme-shared-v1", "api_key": KEY}}
              for alias in ("fast", "cheap")]
    known = Redactor.from_config(parse_config({"model_list": models}), environ={})
    out = known(f"acme-shared-v1 is overloaded ({KEY})")
    assert "acme-shared" not in out and "fast" not in out and "cheap" not in out and KEY not in out, out
    assert out == "[model] is overloaded ([redacted])"


def test_a_stream_answered_with_a_whole_response_keeps_the_answer(url: str,
                                                                  scripted: AnsweringUpstream) -> None:
    """A streamed ``/v1/responses`` whose upstream answered plain JSON: its events, the answer in them."""
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "The answer is 42.", "annotations": []}]}
    answer = {"id": "resp_1", "object": "response", "status": "completed", "model": RESP, "output": [item],
              "usage": {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8}}
    scripted.script(RESP, json_answer(200, answer))
    response = _ask(url, "responses stream")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.completed", response.text
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "The answer is 42."
    assert events[-1]["response"]["model"] == "r" and RESP not in response.text
