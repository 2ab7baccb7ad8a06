"""Issue 57's done-when, as a property: whatever an upstream answers, no relayed answer or event
carries a configured secret, an upstream host or an upstream model name.

One gateway (started once for the module) in front of one scripted upstream on 127.0.0.1
(``answering_upstream``), which answers each example with bytes hypothesis chose: any route (the
chat relay and LiteLLM's chat path, Anthropic Messages relayed and over chat, Responses relayed and
over both chat paths, compact), any status (2xx included), a body as JSON in every error shape
upstreams use, a success answer naming the upstream model, an event stream with an error event
(typed, untyped ``data: {"error": ...}``, ``response.failed``, plain text), or plain text; the value
right after (and before) every JSON escape an encoder writes (``\\n``, ``\\"``, ``\\/``, Go's
``\\u003c``, ...), spelled as is or itself escaped, drawn from every secret the gateway knows:
keys, nested ``litellm_params`` strings (``extra_headers``, ``headers``, ``default_headers``, a
dict in a list in ``extra_body``), LiteLLM's credential variables, the proxy's host and password,
the upstream's host and every upstream model name.

The checker reads what the client got in every form it may be read in: the raw bytes and headers,
the body decoded as JSON, and each event's data decoded as JSON (a value escaped on the wire,
``\\u0073k-...``, is the secret once decoded).

``make test`` runs a bounded, derandomized profile (``ci``); ``make fuzz`` a longer one
(``HYPOTHESIS_PROFILE=fuzz``). What it found is kept below as a focused test each.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from answering_upstream import Answer, AnsweringUpstream
from conftest import MASTER_KEY, ServerThread
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import create_app
from gateway.config import parse_config

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("redaction-ci", max_examples=100, deadline=None, derandomize=True,
                          suppress_health_check=_SLOW)
settings.register_profile("redaction-fuzz", max_examples=1000, deadline=None, suppress_health_check=_SLOW)
PROFILE = settings.get_profile("redaction-" + os.environ.get("HYPOTHESIS_PROFILE", "ci"))

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
HELLO = [{"role": "user", "content": "hello"}]

# -- what the operator configured: each value one the client must never see ------------------------

KEY = "sk-live-0042-operator-secret"
ANTHROPIC_KEY = "sk-ant-operator-0042-secret"
TENANT = "tnt-live-7f3a9c2e41"  # extra_headers (LiteLLM's usual custom auth header)
ORG = "org-9f8e7d6c5b4a"  # headers
ROUTE_TOKEN = "rte-blue-team-77c1"  # default_headers, on a deployment no example calls
BILLING = "billing-ref-0091-acme"  # extra_body: a dict in a list in a dict
BEDROCK = "ABSKQmVkcm9ja0FQSUtleS1zecret"  # AWS_BEARER_TOKEN_BEDROCK, read from the environment
PROXY_HOST, PROXY_PASSWORD = "egress.corp.example", "pr0xypass-55"  # HTTPS_PROXY
ENVIRONMENT = {"AWS_BEARER_TOKEN_BEDROCK": BEDROCK,
               "HTTPS_PROXY": f"http://squid:{PROXY_PASSWORD}@{PROXY_HOST}:3128"}
# upstream model names; no alias holds a byte of one
CHAT, TENANTED, RESP = "acme-chat-v3", "acme-tenant-v3", "acme-resp-v3"
ANTH, NESTED = "acme-anth-v3", "acme-nest-v3"


def _config(base: str) -> dict[str, Any]:
    def openai(name: str, model: str, **params: Any) -> dict[str, Any]:
        return {"model_name": name, "litellm_params": {"model": f"openai/{model}", "api_base": base,
                                                       "api_key": KEY, **params}}

    models = [
        openai("c", CHAT),  # the raw chat relay (and compact)
        openai("t", TENANTED, extra_headers={"x-tenant-token": TENANT}, headers={"X-Org-Secret": ORG},
               extra_body={"metadata": {"tags": ["blue", {"billing": BILLING}]}}),  # LiteLLM's path
        {**openai("r", RESP), "model_info": {"responses_api": True}},  # the Responses relay
        {"model_name": "a", "litellm_params": {"model": f"anthropic/{ANTH}", "api_key": ANTHROPIC_KEY,
                                               "api_base": base.removesuffix("/v1")}},  # the Messages relay
        openai("n", NESTED, default_headers={"x-route": ROUTE_TOKEN}),
    ]
    # Nothing here is long enough to compress: MixPR in a thread, so no fork server imports it and LiteLLM.
    return {"model_list": models,
            "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread"}}


@pytest.fixture(scope="module")
def scripted() -> Iterator[AnsweringUpstream]:
    server = AnsweringUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def url(scripted: AnsweringUpstream) -> Iterator[str]:
    # The credential variables are read when the app is made; only that long (a proxy set for longer
    # would be every later test's).
    with pytest.MonkeyPatch.context() as env:
        for name, value in ENVIRONMENT.items():
            env.setenv(name, value)
        app = create_app(parse_config(_config(scripted.base_url)))
    server = ServerThread(app).start()
    yield server.url
    server.stop()


def _secrets(scripted: AnsweringUpstream) -> list[str]:
    """Every value no answer may carry (a host also as ``urlsplit`` and the upstream spell it)."""
    return [KEY, ANTHROPIC_KEY, TENANT, ORG, ROUTE_TOKEN, BILLING, BEDROCK, PROXY_HOST, PROXY_PASSWORD,
            f"127.0.0.1:{scripted.port}", "127.0.0.1", CHAT, TENANTED, RESP, ANTH, NESTED]


# -- the routes: (alias, path, body, the wire format its upstream speaks) ----------------------------

STREAM = {"stream": True}
MESSAGES = {"messages": HELLO, "max_tokens": 16}


@dataclass(frozen=True)
class Route:
    alias: str
    path: str
    body: dict[str, Any]
    wire: str  # chat, responses, messages or compact: what the upstream is asked, and answers

    @property
    def model(self) -> str:
        return {"c": CHAT, "t": TENANTED, "r": RESP, "a": ANTH}[self.alias]


ROUTES = {
    "chat relay": Route("c", "/v1/chat/completions", {"messages": HELLO}, "chat"),
    "chat relay stream": Route("c", "/v1/chat/completions", {"messages": HELLO, **STREAM}, "chat"),
    "chat litellm": Route("t", "/v1/chat/completions", {"messages": HELLO}, "chat"),
    "chat litellm stream": Route("t", "/v1/chat/completions", {"messages": HELLO, **STREAM}, "chat"),
    "chat litellm anthropic": Route("a", "/v1/chat/completions", {"messages": HELLO}, "messages"),
    "messages": Route("a", "/v1/messages", MESSAGES, "messages"),
    "messages stream": Route("a", "/v1/messages", {**MESSAGES, **STREAM}, "messages"),
    "messages over chat": Route("c", "/v1/messages", MESSAGES, "chat"),
    "messages over chat stream": Route("c", "/v1/messages", {**MESSAGES, **STREAM}, "chat"),
    "responses relay": Route("r", "/v1/responses", {"input": "hello"}, "responses"),
    "responses relay stream": Route("r", "/v1/responses", {"input": "hello", **STREAM}, "responses"),
    "responses over chat": Route("c", "/v1/responses", {"input": "hello"}, "chat"),
    "responses over chat stream": Route("c", "/v1/responses", {"input": "hello", **STREAM}, "chat"),
    "responses over litellm": Route("t", "/v1/responses", {"input": "hello"}, "chat"),
    "responses over litellm stream": Route("t", "/v1/responses", {"input": "hello", **STREAM}, "chat"),
    "compact": Route("c", "/v1/responses/compact", {"input": HELLO}, "compact"),
}

# -- what a careless upstream writes -----------------------------------------------------------------

# Every JSON escape an encoder writes (Go's \u003c \u003e \u0026, JavaScript's \u2028, an ASCII-only
# encoder's \u00e9 and surrogate pairs), each decoding to a character that is not part of a word: on
# the raw text, the letter that ends the escape (the n of \n, the c of \u003c) stood before the value.
ESCAPES = ["\\n", "\\r", "\\t", "\\b", "\\f", '\\"', "\\\\", "\\/", "\\u003c", "\\u003e", "\\u0026",
           "\\u0027", "\\u2028", "\\u00e9", "\\ud83d\\ude00", "\\u0000", "\\u001b", " ", ": "]
SAID, MODEL = "@@said@@", "@@model@@"  # placeholders, swapped for JSON string literals once encoded


def _spelled(value: str, spelling: str) -> str:
    """``value`` inside a JSON string: as is, its first character escaped, or every one escaped."""
    if spelling == "first":
        return f"\\u{ord(value[0]):04x}{value[1:]}"
    if spelling == "all":
        return "".join(f"\\u{ord(c):04x}" for c in value)
    return value


def _error_shapes() -> dict[str, Callable[[str], Any]]:
    """The error bodies upstreams send, ``s`` wherever one puts its text."""
    return {
        "openai": lambda s: {"error": {"message": s, "type": "server_error", "param": None, "code": None}},
        "openai fields": lambda s: {"error": {"message": s, "type": s, "param": s, "code": s}},
        "openai nested fields": lambda s: {"error": {"message": "failed", "code": {"detail": s},
                                                     "param": [s]}},
        "openrouter": lambda s: {"error": {"code": 502, "message": s,
                                           "metadata": {"raw": s, "provider_name": s}}},
        "google": lambda s: {"error": {"code": 500, "message": "failed", "status": "INTERNAL",
                                       "details": [{"reason": s, "metadata": {"host": s}}]}},
        "google list": lambda s: [{"error": {"code": 500, "message": s, "status": "INTERNAL"}}],
        "tgi": lambda s: {"error": s, "error_type": "generation"},
        "errors": lambda s: {"errors": [{"message": s}, {"message": s, "extensions": {"detail": s}}]},
        "detail": lambda s: {"detail": s},
        "detail list": lambda s: {"detail": [{"loc": ["body", s], "msg": s, "type": "value_error"}]},
        "detail object": lambda s: {"detail": {"message": s, "hint": [s]}},
        "anthropic": lambda s: {"type": "error", "error": {"type": "api_error", "message": s}},
        "responses event": lambda s: {"type": "error", "sequence_number": 1, "code": "server_error",
                                      "message": s, "param": None},
        "failed": lambda s: {"id": "resp_1", "object": "response", "status": "failed", "output": [],
                             "error": {"code": "server_error", "message": s}},
        "failed event": lambda s: {"type": "response.failed", "sequence_number": 1, "response": {
            "id": "resp_1", "status": "failed", "error": {"code": "server_error", "message": s}}},
        "string": lambda s: s,
    }


ERROR_SHAPES = _error_shapes()
# An error body no API's answer could be mistaken for only beside an error status: at 2xx, an object
# in none of the shapes above is an answer (or an event), relayed as the upstream sent it.
STATUS_ONLY_SHAPES = {"message": lambda s: {"message": s, "status": "bad"}}
ANSWERS = {  # a success answer of each wire format, naming its model where that format does
    "chat": {"id": "c1", "object": "chat.completion", "created": 1, "model": MODEL, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
    "responses": {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
                  "model": MODEL, "output": [{"id": "msg_1", "type": "message", "role": "assistant",
                                              "status": "completed", "content": [
                                                  {"type": "output_text", "text": "ok", "annotations": []}]}],
                  "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}},
    "messages": {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
                 "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                 "usage": {"input_tokens": 1, "output_tokens": 1}},
    "compact": {"id": "resp_1", "object": "response.compaction", "created_at": 1, "output": [],
                "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}},
}
FIRST_EVENTS = {  # the event a stream of each wire format starts with, naming its model
    "chat": (None, {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "he"}}]}),
    "responses": ("response.created", {"type": "response.created", "sequence_number": 0, "response": {
        "id": "resp_1", "object": "response", "status": "in_progress", "model": MODEL, "output": []}}),
    "messages": ("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "content": [],
        "usage": {"input_tokens": 1, "output_tokens": 0}}}),
}
FIRST_EVENTS["compact"] = FIRST_EVENTS["responses"]


@dataclass(frozen=True)
class Leak:
    """One example's leak-laden text: ``secret`` between two escapes, spelled as ``spelling`` says."""

    secret: str
    before: str
    after: str
    spelling: str
    ascii_only: bool  # the rest of the JSON as an ASCII-only encoder writes it

    def literal(self) -> str:
        """The text as a JSON string literal's inside (the escapes as escapes)."""
        return f"upstream failed{self.before}{_spelled(self.secret, self.spelling)}{self.after}retry later"

    def text(self) -> str:
        """The same text where no JSON is: a plain body quoting JSON, escapes and all."""
        return f"upstream failed{self.before}{self.secret}{self.after}retry later"


def _encoded(payload: Any, leak: Leak, model: str) -> str:
    """``payload`` as JSON, each placeholder replaced by its string literal, escapes as written."""
    text = json.dumps(payload, ensure_ascii=leak.ascii_only)
    text = text.replace(json.dumps(SAID), f'"{leak.literal()}"')
    return text.replace(json.dumps(MODEL), f'"{_spelled(model, leak.spelling)}"')


def _event(kind: str | None, data: str, eol: str) -> str:
    return (f"event: {kind}{eol}" if kind else "") + f"data: {data}{eol}{eol}"


@st.composite
def upstream_answers(draw: st.DrawFn, route: Route, secrets: list[str]) -> Answer:
    """An answer to ``route``'s upstream request: status, content type and leak-laden body."""
    escapes = st.sampled_from(ESCAPES)
    leak = Leak(draw(st.sampled_from(secrets)), draw(escapes), draw(escapes),
                draw(st.sampled_from(["as is", "first", "all"])), draw(st.booleans()))
    status = draw(st.sampled_from([200, 201, 400, 404, 409, 422, 429, 500, 502, 503, 529]))
    kind = draw(st.sampled_from(["json", "answer", "stream", "text"]))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    if kind == "json":
        shapes = ERROR_SHAPES if status < 300 else {**ERROR_SHAPES, **STATUS_ONLY_SHAPES}
        body, content_type = _encoded(shapes[draw(st.sampled_from(sorted(shapes)))](SAID),
                                      leak, route.model), "application/json"
    elif kind == "answer":
        body, content_type = _encoded(ANSWERS[route.wire], leak, route.model), "application/json"
    elif kind == "stream":
        first_kind, first = FIRST_EVENTS[route.wire]
        error_kind = draw(st.sampled_from([None, "error", "response.failed"]))
        shape = draw(st.sampled_from(sorted(ERROR_SHAPES)))
        data = _encoded(ERROR_SHAPES[shape](SAID), leak, route.model) if shape != "string" else leak.text()
        body = _event(first_kind, _encoded(first, leak, route.model), eol) + _event(error_kind, data, eol)
        body += "data: [DONE]" + eol + eol if draw(st.booleans()) else ""
        content_type = "text/event-stream"
    else:
        body = leak.text() if draw(st.booleans()) else (
            f"<html>{eol}{eol}<h1>{status}</h1>{eol}{eol}<p>{leak.text()}</p>{eol}</html>")
        content_type = "text/html"
    if draw(st.booleans()):  # a content type that says something else (a proxy's, a careless server's)
        content_type = draw(st.sampled_from(["application/json", "text/event-stream", "text/plain"]))
    return Answer(status, body.encode(), content_type)


# -- what the client got, in every form it may read it -----------------------------------------------

LINE_END = re.compile(r"\r\n|\r|\n")  # SSE's line ends only (str.splitlines would cut at U+2028)


def _strings(value: Any) -> Iterator[str]:
    """Every string of a decoded JSON value, its keys too."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _decoded(text: str) -> Iterator[Any]:
    """The body as JSON, and each ``data:`` line's value as JSON, where they are JSON."""
    for candidate in [text, *(line[5:].strip() for line in LINE_END.split(text) if line.startswith("data:"))]:
        try:
            yield json.loads(candidate)
        except ValueError:
            continue


def _forms(response: httpx.Response) -> list[str]:
    """What the client got: raw bytes, headers, and every decoded string."""
    text = response.content.decode("utf-8", errors="replace")
    headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
    return [text, headers, *("\n".join(_strings(value)) for value in _decoded(text))]


def leaks(response: httpx.Response, secrets: list[str]) -> list[str]:
    forms = [form.lower() for form in _forms(response)]
    return [secret for secret in secrets if any(secret.lower() in form for form in forms)]


# Routes whose every answer the gateway reads itself (the relays), or maps when LiteLLM cannot (its
# Anthropic code): LiteLLM's OpenAI path still fails on some 2xx bodies ({"errors": [...]}) inside.
READ_ANSWERS = frozenset(name for name in ROUTES if "litellm" not in name and "over chat" not in name) | {
    "chat litellm anthropic", "responses over chat", "responses over chat stream"}

# -- the property ------------------------------------------------------------------------------------

def _ask(url: str, route: Route) -> httpx.Response:
    return httpx.post(url + route.path, json={"model": route.alias, **route.body}, headers=AUTH, timeout=60)


@settings(PROFILE)
@given(data=st.data(), route_name=st.sampled_from(sorted(ROUTES)))
def test_no_relayed_answer_or_event_carries_an_operators_value(url: str, scripted: AnsweringUpstream,
                                                                data: st.DataObject, route_name: str) -> None:
    """Any route, status, body and content type; any secret after any escape, spelled as is or
    escaped: the client reads none of them, raw or decoded."""
    route = ROUTES[route_name]
    answer = data.draw(upstream_answers(route, _secrets(scripted)), label="answer")
    scripted.script(route.model, answer)
    response = _ask(url, route)
    found = leaks(response, _secrets(scripted))
    assert not found, (found, response.status_code, response.text)
    if route_name in READ_ANSWERS:  # whatever the upstream answered, never the gateway's own bug
        assert "internal error" not in response.text, (response.status_code, response.text)


def test_the_checker_reads_a_secret_escaped_on_the_wire(scripted: AnsweringUpstream) -> None:
    """The checker itself: a value escaped in the raw bytes (``\\u0073k-...``) is found once decoded,
    in a body and in an event's data; a redacted one is not."""
    escaped = _spelled(KEY, "all")
    for body in (f'{{"message": "{escaped}"}}', f'data: {{"error": "{escaped}"}}\n\n'):
        assert leaks(httpx.Response(502, text=body), [KEY]) == [KEY]
        assert KEY not in body
    assert leaks(httpx.Response(502, text='{"message": "sk-[redacted]"}'), [KEY]) == []


# -- what the property found, one test each ------------------------------------------------------------

def _quoted(scripted: AnsweringUpstream) -> str:
    """A text that quotes JSON as it was written: each value right after an escape, on the raw text."""
    return (f'upstream said {{"error": "overloaded:\\n127.0.0.1:{scripted.port}\\u003c{CHAT}\\t{TENANT}'
            f'\\\\{ANTH}"}}')


@pytest.mark.parametrize("route", ["chat relay", "chat litellm", "messages", "responses relay", "compact",
                                   "responses over litellm"])
def test_a_text_quoting_json_loses_what_follows_each_escape(url: str, scripted: AnsweringUpstream,
                                                             route: str) -> None:
    """A proxy's page (or a plain-text 500) quoting the upstream's JSON: the text is no JSON to decode,
    and on it the ``n`` of ``\\n`` stood glued to the host, the ``c`` of ``\\u003c`` to the model."""
    scripted.script(ROUTES[route].model, Answer(500, _quoted(scripted).encode(), "text/html"))
    response = _ask(url, ROUTES[route])
    assert response.status_code == 500, response.text
    assert not leaks(response, _secrets(scripted)), response.text
    assert "overloaded" in response.text


def test_an_errors_list_and_object_fields_are_redacted(url: str, scripted: AnsweringUpstream) -> None:
    """``param`` and ``code`` are the upstream's too, whatever their type: a list or an object in them
    went out as it came."""
    said = f"bad value for {TENANT} at 127.0.0.1:{scripted.port}"
    error = {"error": {"message": "failed", "param": [said], "code": {"detail": said}}}
    scripted.script(TENANTED, Answer(400, json.dumps(error).encode()))
    response = _ask(url, ROUTES["chat litellm"])
    assert response.status_code == 400, response.text
    assert not leaks(response, _secrets(scripted)), response.text
    assert response.json()["error"]["param"] == ["bad value for [redacted] at [upstream-host]"]


@pytest.mark.parametrize("data", ["plain", "list", "string"])
@pytest.mark.parametrize("route", ["chat relay stream", "messages stream", "responses relay stream"])
def test_a_stream_event_that_is_no_apis_event_is_an_error(url: str, scripted: AnsweringUpstream,
                                                          route: str, data: str) -> None:
    """Every API's event data is a JSON object (or ``[DONE]``): plain text, a list (Google's error
    list) or a string after the first event is an upstream's error text, and went out byte for byte."""
    said = f"upstream failed: {KEY} at 127.0.0.1:{scripted.port}"
    line = {"plain": said, "list": json.dumps([{"error": {"code": 500, "message": said}}]),
            "string": json.dumps(said)}[data]
    first_kind, first = FIRST_EVENTS[ROUTES[route].wire]
    body = _event(first_kind, _encoded(first, Leak("", "", "", "as is", False), RESP), "\n")
    answer = Answer(200, (body + f"data: {line}\n\n").encode(), "text/event-stream")
    scripted.script(ROUTES[route].model, answer)
    response = _ask(url, ROUTES[route])
    assert not leaks(response, _secrets(scripted)), response.text
    events = [e for e in _decoded(response.text) if isinstance(e, dict)]  # each event's data
    errors = [e for e in events if e.get("type") == "error" or "error" in e]
    assert errors and "upstream failed" in json.dumps(errors[0]), response.text


@pytest.mark.parametrize("body", ["list", "string", "failed event"])
@pytest.mark.parametrize("route", ["chat relay", "responses over chat"])
def test_a_2xx_that_is_no_answer_leaves_by_the_one_exit(url: str, scripted: AnsweringUpstream, route: str,
                                                        body: str) -> None:
    """The chat relay passed any 2xx JSON on (Responses over it then failed with the gateway's own
    internal error): a list or a string is no chat answer (a 502, as text is), a failed Response
    event an error."""
    said = f"upstream failed: {KEY} at 127.0.0.1:{scripted.port}"
    payload = {"list": [{"error": {"code": 500, "message": said}}], "string": said,
               "failed event": {"type": "response.failed", "response": {
                   "status": "failed", "error": {"code": "server_error", "message": said}}}}[body]
    scripted.script(CHAT, Answer(200, json.dumps(payload).encode()))
    response = _ask(url, ROUTES[route])
    assert response.status_code == 502, response.text
    assert not leaks(response, _secrets(scripted)), response.text
    expected = "server_error" if body == "failed event" else "upstream_invalid_response"
    assert response.json()["error"]["code"] == expected, response.text


@pytest.mark.parametrize("body", ["openai", "anthropic", "text", "events"])
def test_a_2xx_litellm_cannot_read_is_answered_as_the_relay_answers_it(url: str, scripted: AnsweringUpstream,
                                                                       body: str) -> None:
    """Chat completions to an Anthropic deployment (LiteLLM's path): a 200 that is no message (an
    error, text, a stream) failed LiteLLM's parsing, and the client got the gateway's own 500
    internal error; it is the answer the chat relay gives for the same body."""
    said = f"overloaded:\n{KEY} at 127.0.0.1:{scripted.port}"
    raw = {"openai": json.dumps({"error": {"message": said, "type": "overloaded_error", "code": "busy"}}),
           "anthropic": json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": said}}),
           "text": said, "events": 'event: message_start\ndata: {"type": "message_start"}\n\n'}[body]
    answers = {}
    for route in ("chat litellm anthropic", "chat relay"):
        scripted.script(ROUTES[route].model, Answer(200, raw.encode(), "application/json"))
        answers[route] = _ask(url, ROUTES[route])
    response, relayed = answers["chat litellm anthropic"], answers["chat relay"]
    assert (response.status_code, response.json()) == (relayed.status_code, relayed.json()), response.text
    assert response.status_code == 502 and not leaks(response, _secrets(scripted)), response.text
    expected = "overloaded:\n[redacted]" if body in ("openai", "anthropic") else "not JSON"
    assert expected in response.json()["error"]["message"], response.text


WHOLE_ROUTES = ["chat relay stream", "messages stream", "responses relay stream",
                "responses over chat stream"]


def _events(response: httpx.Response) -> list[Any]:
    """Each event's data, decoded (``[DONE]`` as the text it is)."""
    lines = [line[5:].strip() for line in LINE_END.split(response.text) if line.startswith("data:")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


@pytest.mark.parametrize("body", ["openai", "anthropic", "text"])
@pytest.mark.parametrize("route", WHOLE_ROUTES)
def test_a_stream_answered_with_a_whole_error_ends_in_the_streams_error(url: str, scripted: AnsweringUpstream,
                                                                        route: str, body: str) -> None:
    """A streamed request the upstream answered 200 with plain JSON that is an error (OpenRouter's
    {"error": ...} once a model started, Anthropic's {"type": "error"}) or with text: the chat relay
    sent an empty stream and [DONE], the Messages relay an error that lost what the upstream said.
    It is the stream's one error event, mapped and redacted as the same body unstreamed."""
    said = f"overloaded:\n{KEY} at 127.0.0.1:{scripted.port}"
    raw = {"openai": json.dumps({"error": {"message": said, "type": "overloaded_error", "code": "busy"}}),
           "anthropic": json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": said}}),
           "text": said}[body]
    scripted.script(ROUTES[route].model, Answer(200, raw.encode(), "application/json"))
    response = _ask(url, ROUTES[route])
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert not leaks(response, _secrets(scripted)), response.text
    events = [e for e in _events(response) if e != "[DONE]"]
    errors = [e.get("error", e) for e in events if e.get("type") == "error" or "error" in e]
    assert len(errors) == 1 and len(events) == 1, response.text  # the error, and nothing said before it
    expected = "overloaded:\n[redacted]" if body != "text" else "not JSON"
    assert expected in errors[0]["message"], response.text
    if route == "chat relay stream":  # the error the unstreamed chat relay answers, then [DONE]
        unstreamed = _ask(url, ROUTES["chat relay"])
        assert events[0] == unstreamed.json() and _events(response)[-1] == "[DONE]", response.text


@pytest.mark.parametrize("route", WHOLE_ROUTES)
def test_a_stream_answered_with_a_whole_answer_keeps_the_answer(url: str, scripted: AnsweringUpstream,
                                                                route: str) -> None:
    """A streamed request answered 200 with the whole answer in JSON: its events, the answer in them,
    ended as a stream of that API ends (the chat relay sent [DONE] alone, the Messages relay an error)."""
    wire = ROUTES[route].wire
    text = json.dumps(ANSWERS[wire]).replace('"ok"', '"The answer is 42."')
    scripted.script(ROUTES[route].model, Answer(200, text.replace(json.dumps(MODEL), json.dumps(
        ROUTES[route].model)).encode(), "application/json"))
    response = _ask(url, ROUTES[route])
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert not leaks(response, _secrets(scripted)), response.text
    events = _events(response)
    said = [e for e in events if e != "[DONE]"]
    assert "The answer is 42." in "".join(_strings(said)), response.text
    assert not any("error" in e for e in said), response.text
    last = {"chat relay stream": "[DONE]", "messages stream": {"type": "message_stop"}}.get(route)
    assert events[-1] == last if last else events[-1]["type"] == "response.completed", response.text
