"""The raw relay (``gateway.upstream.chat_relay``, issue 23): taken for passthrough chat requests to
OpenAI-compatible upstreams, not taken when compression, translation or Self-Route is needed, and
the same for the client on both paths: the upstream's request, statuses, error bodies, headers.

Two gateways over one config and one recording upstream: ``relay_url`` (the default) and
``litellm_url`` (``raw_relay: false``, every request through LiteLLM as before the relay).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import litellm
import pytest
from conftest import MASTER_KEY, ServerThread, gateway_config, model
from corpus import QUESTION, haystack
from fake_upstream import REPLY_TEXT, FakeUpstream

from gateway import create_app
from gateway.config import parse_config
from gateway.upstream import chat_relay, http, sse

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
HELLO = [{"role": "user", "content": "hello"}]
SR = {"enabled": True, "fallback_model": "gpt-test"}
# A stream as a real server may send it: a comment, CRLF line ends, an event split across writes
# (mid-JSON), usage with cached tokens in the last event, pieces written with pauses between them.
EVENT = b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}'
USAGE_EVENT = (b'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,'
               b'"completion_tokens":1,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":6}}}')
CANNED = [b": keep-alive\n\n", EVENT[:40], EVENT[40:] + b"\r\n\r\n", EVENT + b"\n\n" + USAGE_EVENT[:70],
          USAGE_EVENT[70:] + b"\n\n", b"data: [DONE]\n\n"]


class CannedStream:
    """An upstream that answers every chat request with ``CANNED`` (or, for the model ``no-done``,
    the same without its ``[DONE]``), in separate writes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        body = json.loads(await reader.readexactly(length))
        pieces = CANNED[:-1] if body["model"] == "no-done" else CANNED
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture(scope="module")
def canned() -> Iterator[CannedStream]:
    server = CannedStream()
    yield server
    server.stop()


def _config(base: str, canned_port: int, *, raw_relay: bool) -> dict[str, Any]:
    raw = gateway_config(base)
    canned_base = f"http://127.0.0.1:{canned_port}/v1"
    raw["model_list"] += [
        model("canned", "canned", canned_base), model("canned-no-done", "no-done", canned_base),
        model("status-401", "mode-status-401", base), model("status-408", "mode-status-408", base),
        model("status-503", "mode-status-503", base), model("text-502", "mode-text-502", base),
        model("context-400", "mode-context-400", base),
        model("vllm", "echo", base, litellm_params={"model": "hosted_vllm/echo"}),
        model("o-series", "echo", base, litellm_params={"model": "openai/o3-mini"}),
        model("retrying", "echo", base, litellm_params={"max_retries": 1}),
        model("config-params", "echo", base, litellm_params={"temperature": 0.1}),
        model("self-routed", "mode-needle-fast", base, model_info={"max_input_tokens": 3000},
              mixpr={"budget_tokens": 800, "self_route": SR}),
    ]
    raw["general_settings"].update(compression_executor="thread", raw_relay=raw_relay)
    return raw


@pytest.fixture(scope="module")
def relay_url(upstream: FakeUpstream, canned: CannedStream) -> Iterator[str]:
    server = ServerThread(create_app(parse_config(_config(upstream.base_url, canned.port, raw_relay=True))))
    yield server.start().url
    server.stop()


@pytest.fixture(scope="module")
def litellm_url(upstream: FakeUpstream, canned: CannedStream) -> Iterator[str]:
    server = ServerThread(create_app(parse_config(_config(upstream.base_url, canned.port, raw_relay=False))))
    yield server.start().url
    server.stop()


def _post(url: str, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, headers={**AUTH, **kwargs.pop("headers", {})},
                      timeout=30, **kwargs)


def _calls(url: str, name: str, via: str) -> float:
    """``mixpr_upstream_calls_total`` for model ``name`` and path ``via``."""
    pattern = rf'^mixpr_upstream_calls_total\{{model="{re.escape(name)}",via="{via}"\}} (\S+)$'
    match = re.search(pattern, httpx.get(url + "/metrics").text, re.M)
    return float(match.group(1)) if match else 0.0


def _metric(url: str, line: str) -> float:
    match = re.search(rf"^{re.escape(line)} (\S+)$", httpx.get(url + "/metrics").text, re.M)
    return float(match.group(1)) if match else 0.0


# -- which deployments take it ---------------------------------------------------------------------


def test_routes_are_worked_out_once_from_the_config(upstream: FakeUpstream, canned: CannedStream) -> None:
    config = parse_config(_config(upstream.base_url, canned.port, raw_relay=True))
    client = http.Client(http.Policy.from_env(max_connections=8))
    found = chat_relay.Relay.for_models(config.model_list, client, timeout=600).routes
    assert {"gpt-test", "small", "slow", "canned", "status-401"} <= set(found)
    # LiteLLM translates these (tool schemas, renamed parameters), retries, or adds parameters.
    assert not {"vllm", "o-series", "retrying", "config-params"} & set(found)
    fast = found["gpt-test"]
    assert fast.url == upstream.base_url + "/chat/completions" and fast.model == "echo"
    assert fast.headers["authorization"] == "Bearer sk-upstream-secret"
    assert (found["slow"].timeout.sock_read, found["slow"].timeout.connect) == (0.5, 0.5)
    assert chat_relay.Relay.for_models(config.model_list, client, timeout=600, enabled=False).routes == {}


@pytest.mark.parametrize("stream", [False, True])
def test_a_passthrough_goes_around_litellm(relay_url: str, litellm_url: str, stream: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(**kwargs: Any) -> Any:
        raise AssertionError("LiteLLM was called")

    monkeypatch.setattr(litellm, "acompletion", broken)
    before = _calls(relay_url, "gpt-test", "relay")
    response = _post(relay_url, {"model": "gpt-test", "messages": HELLO, "stream": stream})
    assert response.status_code == 200
    assert REPLY_TEXT.split(" ")[0] in response.text
    assert response.headers["x-mixpr-action"] == "passthrough"
    assert _calls(relay_url, "gpt-test", "relay") == before + 1
    # The same request through LiteLLM meets the patch: the relay above really went around it.
    assert _post(litellm_url, {"model": "gpt-test", "messages": HELLO, "stream": stream}).status_code == 500


@pytest.mark.parametrize("name", ["vllm", "o-series", "retrying", "config-params"])
def test_translated_deployments_keep_litellm(relay_url: str, name: str) -> None:
    before = _calls(relay_url, name, "litellm")
    response = _post(relay_url, {"model": name, "messages": HELLO})
    assert response.status_code == 200, response.text
    assert _calls(relay_url, name, "litellm") == before + 1
    assert _calls(relay_url, name, "relay") == 0


def test_a_compressed_request_keeps_litellm(relay_url: str) -> None:
    long_prompt = haystack(600, seed=5) + "\n\n" + QUESTION
    before = _calls(relay_url, "small", "litellm"), _calls(relay_url, "small", "relay")
    response = _post(relay_url, {"model": "small", "messages": [{"role": "user", "content": long_prompt}]})
    assert response.status_code == 200
    assert response.headers["x-mixpr-action"] == "compressed"
    assert (_calls(relay_url, "small", "litellm"), _calls(relay_url, "small", "relay")) == (before[0] + 1,
                                                                                            before[1])


@pytest.mark.parametrize("stream", [False, True])
def test_self_route_keeps_litellm_and_a_short_prompt_takes_the_relay(relay_url: str, stream: bool) -> None:
    document = haystack(600, seed=8) + "\n\n" + QUESTION
    before = _calls(relay_url, "self-routed", "litellm"), _calls(relay_url, "self-routed", "relay")
    body = {"model": "self-routed", "messages": [{"role": "user", "content": document}], "stream": stream,
            "needle": "amber-falcon-427"}
    response = _post(relay_url, body)
    assert response.status_code == 200
    assert response.headers["x-mixpr-self-route"] in ("answered", "escalated")
    assert _calls(relay_url, "self-routed", "relay") == before[1]
    assert _calls(relay_url, "self-routed", "litellm") > before[0]
    short = _post(relay_url, {**body, "messages": HELLO})
    assert short.status_code == 200 and "x-mixpr-self-route" not in short.headers
    assert _calls(relay_url, "self-routed", "relay") == before[1] + 1


def test_prompts_just_under_and_just_over_the_trigger(relay_url: str) -> None:
    """At the trigger the prompt passes through the relay; one token lower, it is compressed."""
    prompt = haystack(20, seed=3) + "\n\n" + QUESTION
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": prompt}]}
    tokens = int(_post(relay_url, {**body, "mixpr": {"enabled": False}}).headers["x-mixpr-original-tokens"])
    assert tokens > 100
    relayed = _calls(relay_url, "gpt-test", "relay")
    at = _post(relay_url, {**body, "mixpr": {"enabled": True, "budget_tokens": tokens}})
    assert at.headers["x-mixpr-action"] == "passthrough"
    assert _calls(relay_url, "gpt-test", "relay") == relayed + 1
    over = _post(relay_url, {**body, "mixpr": {"enabled": True, "budget_tokens": tokens - 1}})
    assert over.headers["x-mixpr-action"] == "compressed"
    assert int(over.headers["x-mixpr-original-tokens"]) == tokens
    assert _calls(relay_url, "gpt-test", "relay") == relayed + 1


# -- the same for the client on both paths -----------------------------------------------------------

MESSAGES = [
    {"role": "system", "content": "You are terse.", "name": None},
    {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
    {"role": "user", "content": "Colour?"},
]
TOOLS = [{"type": "function",
          "function": {"name": "look", "parameters": {"type": "object", "properties": {}}}}]
REQUESTS = {
    "plain": {"messages": HELLO},
    "params": {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "auto", "temperature": 0.2, "top_p": None,
               "seed": 1, "user": "u-1", "stop": ["\n"], "max_tokens": 20, "logit_bias": {"42": 1},
               "custom_field": {"keep": [1, None]}, "another": None, "mixpr": {"enabled": False}},
    "stream": {"messages": HELLO, "stream": True, "stream_options": {"include_usage": True}},
    "big-int": {"messages": HELLO, "seed": 2**70},
}


@pytest.mark.parametrize("shape", sorted(REQUESTS))
def test_the_upstream_receives_the_same_request(relay_url: str, litellm_url: str, upstream: FakeUpstream,
                                                shape: str) -> None:
    sent = []
    for url in (relay_url, litellm_url):
        marker = f"{shape}-{url}"
        body = {"model": "gpt-test", **REQUESTS[shape], "metadata": {"marker": marker}}
        response = _post(url, body)
        assert response.status_code == 200, response.text
        [request] = [r for r in upstream.received("echo") if marker.encode() in r.raw_body]
        sent.append((request.json, request.headers["authorization"], request.path))
    relayed, through_litellm = sent
    assert relayed[0].pop("metadata") != through_litellm[0].pop("metadata")
    assert relayed == through_litellm


ERROR_MODELS = ["rate-limited", "broken", "refuses-400", "refuses-404", "refuses-422", "llama-invalid",
                "status-401", "status-408", "status-503", "text-502", "context-400", "slow", "dropper",
                "unreachable"]


# LiteLLM keeps no error body for these statuses (its exception mapping), so its path answers with
# "litellm.AuthenticationError: AuthenticationError: OpenAIException - <message>"; the relay sends
# the upstream's own error object, as both paths do for 400, 404, 422, 429 and 500.
BODY_DROPPED = {"status-503": "Upstream status 503.",
                "text-502": "upstream error page"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", ERROR_MODELS)
def test_upstream_errors_are_the_same_on_both_paths(relay_url: str, litellm_url: str, name: str,
                                                    stream: bool) -> None:
    answers = []
    for url in (relay_url, litellm_url):
        response = _post(url, {"model": name, "messages": HELLO, "stream": stream})
        answers.append((response.status_code, response.json(), response.headers.get("retry-after"),
                        response.headers["content-type"]))
    relayed, through_litellm = answers
    if name in BODY_DROPPED:  # LiteLLM loses the upstream's error object; same status and headers
        assert (relayed[0], relayed[2:]) == (through_litellm[0], through_litellm[2:])
        assert relayed[1]["error"]["message"] == BODY_DROPPED[name]
        assert through_litellm[1]["error"]["message"].endswith(" - " + BODY_DROPPED[name])
    else:
        assert relayed == through_litellm
    assert relayed[0] >= 400 and set(relayed[1]["error"]) == {"message", "type", "param", "code"}
    assert _calls(relay_url, name, "relay") > 0
    if name == "context-400":  # clients look for this code to shorten their prompt
        assert (relayed[1]["error"]["type"], relayed[1]["error"]["code"]) == (
            "invalid_request_error", "context_length_exceeded")


def test_an_error_midway_through_a_stream_is_the_same_final_event(relay_url: str, litellm_url: str) -> None:
    tails = []
    for url in (relay_url, litellm_url):
        response = _post(url, {"model": "midstream", "messages": HELLO, "stream": True})
        assert response.status_code == 200
        events = [e for e in response.text.split("\n\n") if e]
        assert json.loads(events[0][len("data: "):])["object"] == "chat.completion.chunk"
        tails.append(events[-2:])
    assert tails[0] == tails[1]
    assert tails[0][-1] == "data: [DONE]" and json.loads(tails[0][0][6:])["error"]["code"] == (
        "upstream_connection_error")


@pytest.mark.parametrize("stream", [False, True])
def test_headers_and_usage_metrics_are_the_same(relay_url: str, litellm_url: str, stream: bool) -> None:
    answers = []
    for url in (relay_url, litellm_url):
        line = 'mixpr_upstream_cached_tokens_total{kind="read",model="cached"}'
        before = _metric(url, line)
        body = {"model": "cached", "messages": HELLO, "stream": stream,
                **({"stream_options": {"include_usage": True}} if stream else {})}
        response = _post(url, body)
        assert response.status_code == 200
        headers = {k: v for k, v in response.headers.items() if k.startswith("x-") or k in (
            "content-type", "cache-control")}
        answers.append((headers, _metric(url, line) - before))
    assert answers[0] == answers[1]
    assert answers[0][1] == 8


# -- streams byte for byte -----------------------------------------------------------------------------


def test_a_stream_is_relayed_byte_for_byte(relay_url: str) -> None:
    line = 'mixpr_upstream_cached_tokens_total{kind="read",model="canned"}'
    before = _metric(relay_url, line)
    with httpx.stream("POST", relay_url + "/v1/chat/completions", headers=AUTH, timeout=30,
                      json={"model": "canned", "messages": HELLO, "stream": True}) as response:
        received = response.read()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert received == b"".join(CANNED)
    assert _metric(relay_url, line) == before + 6  # the usage, read from the last event


def test_a_stream_without_done_gets_one(relay_url: str) -> None:
    response = _post(relay_url, {"model": "canned-no-done", "messages": HELLO, "stream": True})
    assert response.content == b"".join(CANNED[:-1]) + b"data: [DONE]\n\n"


def test_event_boundaries_and_usage() -> None:
    assert sse.Framer().feed(b"data: 1\n\ndata: 2") == [b"data: 1\n\n"]
    assert sse.Framer().feed(b"data: 1\r\n\r\ndata") == [b"data: 1\r\n\r\n"]
    assert sse.Framer().feed(b"data: {") == []
    block = b'data: {"usage": {"prompt_tokens": 3}}\n\ndata: {"usage": null}\n\n'
    assert chat_relay._usage(block) == {"prompt_tokens": 3}
    assert chat_relay._usage(b"data: [DONE]\n\n") is None


# -- the Responses API on the relay (issue 30) ------------------------------------------------------

VOLATILE = ("id", "item_id", "created_at", "sequence_number")


def _stable(value: Any) -> Any:
    """A Responses object or event without its generated ids and timestamps."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _no_usage(answer: Any) -> Any:
    if isinstance(answer, dict):
        return {k: None if k == "usage" else _no_usage(v) for k, v in answer.items()}
    return [_no_usage(v) for v in answer] if isinstance(answer, list) else answer


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", ["gpt-test", "tool-user", "thinker", "midstream", "rate-limited"])
def test_the_responses_api_takes_the_relay_with_the_same_answer(relay_url: str, litellm_url: str, name: str,
                                                                 stream: bool) -> None:
    tools = [{"type": "function", "name": "look", "parameters": {"type": "object", "properties": {}}}]
    body = {"model": name, "input": "hello", "instructions": "Be brief.", "tools": tools, "stream": stream}
    answers = []
    for url in (relay_url, litellm_url):
        before = _calls(url, name, "relay")
        response = httpx.post(url + "/v1/responses", json=body, headers=AUTH, timeout=30)
        if stream and response.status_code == 200:
            answer = [_stable(json.loads(e.split("data: ", 1)[1])) for e in response.text.split("\n\n") if e]
        else:
            answer = _stable(response.json())
        answers.append((response.status_code, answer, _calls(url, name, "relay") - before))
    (status, relayed, via_relay), (litellm_status, through_litellm, _) = answers
    if name in ("thinker", "tool-user"):  # usage the upstream does not send: LiteLLM estimates it, the
        relayed, through_litellm = _no_usage(relayed), _no_usage(through_litellm)  # relay does not
    assert (status, relayed) == (litellm_status, through_litellm)
    assert via_relay == 1
