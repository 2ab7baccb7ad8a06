"""The Responses relay: ``/v1/responses`` to an upstream that serves the Responses API itself.

The request is Codex's, in the shapes its ``ResponseItem`` serialises (openai/codex,
``codex-rs/protocol/src/models.rs``: a ``compaction`` item with its ``encrypted_content``, a reasoning
item with ``summary`` and ``encrypted_content``, ``function_call`` / ``function_call_output``; and its
request's ``store: false``, ``include: ["reasoning.encrypted_content"]``, ``prompt_cache_key``), plus an
item type and a top-level field no API has yet. Everything but the long tool output's text must reach
the upstream as sent; that text must arrive compressed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import MASTER_KEY, SMALL_WINDOW, ServerThread
from corpus import QUESTION, haystack
from fake_upstream import LEAK_KEY, LEAK_PATH, RESPONSE, FakeUpstream, response_events

from gateway import create_app
from gateway.config import parse_config

LONG = haystack(600, seed=7)  # ~11k tokens: over the small window
COMPACTION = {"type": "compaction", "encrypted_content": "gAAAAABpM0Yj-codex-summary-of-turns-1-40="}
REASONING = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Reading the log**"}],
             "encrypted_content": "gAAAAABpReasoningOnlyOpenAIReads=="}
UNKNOWN_ITEM = {"type": "hologram_call", "id": "hg_1", "status": "completed", "payload": {"depth": [1, 2.5]}}
CALL = {"type": "function_call", "name": "shell", "arguments": '{"command":["cat","build.log"]}',
        "call_id": "call_log"}
CODEX_BODY: dict[str, Any] = {
    "model": "codex",
    "instructions": "You are Codex, a coding agent. Quote codes exactly.",
    "input": [
        COMPACTION,
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]},
        REASONING,
        CALL,
        {"type": "function_call_output", "call_id": "call_log", "output": LONG},
        UNKNOWN_ITEM,
    ],
    "tools": [{"type": "function", "name": "shell", "description": "Runs a command.", "strict": False,
               "parameters": {"type": "object", "properties": {"command": {"type": "array",
                                                                            "items": {"type": "string"}}}}}],
    "tool_choice": "auto", "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False, "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "019a-codex-session", "text": {"verbosity": "low"},
    "future_field": {"nested": ["kept", 1, None]},
}


@pytest.fixture(scope="module")
def service(upstream: FakeUpstream) -> Iterator[httpx.Client]:
    def entry(name: str, model: str, **info: Any) -> dict[str, Any]:
        return {"model_name": name, "model_info": {"max_input_tokens": SMALL_WINDOW, **info},
                "litellm_params": {"model": model, "api_base": upstream.base_url, "api_key": "sk-up"},
                "mixpr": {"router": "heuristic"}}
    config = {"model_list": [entry("codex", "openai/echo", responses_api=True),
                             entry("codex-200k", "openai/echo", responses_api=True, max_input_tokens=200_000),
                             entry("broken", "openai/mode-500", responses_api=True),
                             entry("cut", "openai/mode-midstream", responses_api=True),
                             entry("leaky", "openai/mode-leak-500", responses_api=True),
                             entry("leaky-stream", "openai/mode-error-event", responses_api=True),
                             entry("chat-only", "openai/echo")],
              "general_settings": {"master_key": MASTER_KEY, "compression_workers": 1,
                                   "compression_executor": "thread"}}
    server = ServerThread(create_app(parse_config(config))).start()
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as c:
        yield c
    server.stop()


def _relayed(upstream: FakeUpstream) -> list[Any]:
    return [r for r in upstream.received() if r.path == "/v1/responses"]


@pytest.mark.parametrize("stream", [False, True])
def test_codex_request_reaches_the_upstream_whole_but_its_long_output(
        service: httpx.Client, upstream: FakeUpstream, stream: bool) -> None:
    upstream.clear()
    body = {**copy.deepcopy(CODEX_BODY), "stream": stream}
    response = service.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-mixpr-action"] == "compressed"
    [seen] = _relayed(upstream)
    sent = seen.json
    assert sent == {**body, "model": "echo", "input": sent["input"]}  # every other field as sent
    items = body["input"]
    assert sent["input"][:4] == items[:4] and sent["input"][5] == UNKNOWN_ITEM
    output = sent["input"][4]
    assert {k: v for k, v in output.items() if k != "output"} == {k: v for k, v in items[4].items()
                                                                  if k != "output"}
    assert isinstance(output["output"], str) and 0 < len(output["output"]) < len(LONG) / 2
    # The opaque items' own bytes, as JSON writes them compactly: nothing re-escaped or reordered.
    for item in (COMPACTION, REASONING, UNKNOWN_ITEM):
        assert json.dumps(item, separators=(",", ":")).encode() in seen.raw_body
    assert seen.headers["authorization"] == "Bearer sk-up"


def test_short_request_passes_byte_for_byte(service: httpx.Client, upstream: FakeUpstream) -> None:
    upstream.clear()
    body = {**CODEX_BODY, "input": [COMPACTION, {"role": "user", "content": "Go on."}, UNKNOWN_ITEM]}
    response = service.post("/v1/responses", json=body)
    assert response.status_code == 200 and response.headers["x-mixpr-action"] == "passthrough"
    [seen] = _relayed(upstream)
    assert seen.json == {**body, "model": "echo"}


def test_answer_comes_back_as_the_upstream_sent_it(service: httpx.Client) -> None:
    response = service.post("/v1/responses", json={"model": "codex", "input": "Hi."})
    assert response.json() == {**RESPONSE, "model": "codex"}  # the client's name for the model


def test_streamed_events_arrive_as_the_upstream_sent_them(service: httpx.Client) -> None:
    body = {"model": "codex", "input": "Hi.", "stream": True}
    with service.stream("POST", "/v1/responses", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        received = b"".join(r.iter_bytes())
    expected = b"".join(response_events("echo")).replace(b'"model":"echo"', b'"model":"codex"')
    assert received == expected  # the unknown event among them, every byte but the model's name


def test_the_openai_sdk_reads_the_relayed_stream(service: httpx.Client) -> None:
    with openai.OpenAI(base_url=str(service.base_url) + "/v1", api_key=MASTER_KEY, max_retries=0) as client:
        with client.responses.stream(model="codex", input="Hi.") as stream:
            deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
            final = stream.get_final_response()
    assert deltas == final.output_text == RESPONSE["output"][1]["content"][0]["text"]
    assert final.output[0].type == "compaction"


def _cached_reads(service: httpx.Client) -> float:
    text = service.get("/metrics").text
    name = 'mixpr_upstream_cached_tokens_total{kind="read",model="codex"}'
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


@pytest.mark.parametrize("stream", [False, True])
def test_usage_is_counted(service: httpx.Client, stream: bool) -> None:
    before = _cached_reads(service)
    response = service.post("/v1/responses", json={"model": "codex", "input": "Hi.", "stream": stream})
    assert response.status_code == 200
    assert _cached_reads(service) - before == RESPONSE["usage"]["input_tokens_details"]["cached_tokens"]


def test_upstream_errors_are_mapped_as_on_every_path(service: httpx.Client) -> None:
    response = service.post("/v1/responses", json={"model": "broken", "input": "Hi."})
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["message"] == "The upstream broke" and "127.0.0.1" not in response.text


@pytest.mark.parametrize("model, stream", [("leaky", False), ("leaky-stream", True)])
def test_the_operators_values_never_reach_the_client(service: httpx.Client, model: str, stream: bool) -> None:
    """An upstream's error status, or an error event in its stream, quoting keys, hosts and files."""
    response = service.post("/v1/responses", json={"model": model, "input": "Hi.", "stream": stream})
    assert "error" in response.text
    for leaked in (LEAK_KEY, LEAK_PATH, "hunter2"):
        assert leaked not in response.text


def test_a_stream_cut_midway_ends_with_an_error_event(service: httpx.Client) -> None:
    with service.stream("POST", "/v1/responses", json={"model": "cut", "input": "Hi.", "stream": True}) as r:
        received = b"".join(r.iter_bytes())
    events = received.split(b"\n\n")
    assert events[0].startswith(b"event: response.created") and b"event: error" in events[-2]
    error = json.loads(events[-2].split(b"data: ", 1)[1])
    assert error["sequence_number"] == 2 and error["code"] == "upstream_connection_error"


@pytest.mark.parametrize("item, code", [(COMPACTION, "unsupported_compaction"),
                                        ({"type": "compaction_trigger"}, "unsupported_compaction"),
                                        (UNKNOWN_ITEM, "unsupported_item"),
                                        (REASONING, "unsupported_item")])
def test_a_chat_upstream_refuses_what_it_cannot_take(service: httpx.Client, upstream: FakeUpstream,
                                                     item: dict[str, Any], code: str) -> None:
    """Served over chat completions (the translation would drop these): a 400 naming the item."""
    upstream.clear()
    body = {"model": "chat-only", "input": [{"role": "user", "content": "Go on."}, item]}
    response = service.post("/v1/responses", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "input[1]" and error["code"] == code
    assert upstream.received() == []


ODD_ITEMS = [
    {"type": 5, "x": None}, {"role": 7, "content": 3.5}, {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": None}, "a bare string", {"type": "input_file", "file_id": "file-1"}]},
    {"type": "function_call_output", "call_id": None, "output": {"content": "x", "success": False}},
    {"type": "function_call", "name": ["odd"], "arguments": {"not": "a string"}},
    {"type": "reasoning", "summary": "not a list", "encrypted_content": 12},
]


def test_odd_items_go_as_sent_never_a_5xx(service: httpx.Client, upstream: FakeUpstream) -> None:
    """Items the gateway has no view of are the upstream's to judge: relayed as sent, not a crash."""
    upstream.clear()
    body = {"model": "codex-200k", "input": ODD_ITEMS}  # each opaque part counts as an image would
    response = service.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    [seen] = _relayed(upstream)
    assert seen.json == {**body, "model": "echo"}


def test_bad_relayed_bodies_are_400(service: httpx.Client, upstream: FakeUpstream) -> None:
    upstream.clear()
    for body, param in [({"model": "codex", "input": []}, "input"),
                        ({"model": "codex", "input": [1]}, "input"),
                        ({"model": "codex", "input": "x", "store": True}, "store"),
                        ({"model": "codex", "input": "x", "stream": "yes"}, "stream"),
                        ({"model": "codex", "input": "x", "tools": "search"}, None)]:
        response = service.post("/v1/responses", json=body)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
        assert param or "parameters (tools)" in response.json()["error"]["message"]
    assert _relayed(upstream) == []
