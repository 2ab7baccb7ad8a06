"""Every Anthropic block a client sends reaches the upstream (issue 25, items 0 and 1), over real HTTP.

Two upstreams record what they receive: an Anthropic one (``fake_anthropic``), which gets the client's
own request with only compressed texts changed, and the OpenAI-compatible one, which gets each block
in its closest chat form.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, SMALL_WINDOW, ServerThread, gateway_config, model
from corpus import QUESTION, haystack
from fake_anthropic import SHORT_TEXT, FakeAnthropic
from fake_upstream import FakeUpstream

from gateway import create_app
from gateway.api import anthropic_blocks
from gateway.config import parse_config

BETA = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27"
SIGNATURE = "EqQBCkgIARABGAIiQL2fakesignature=="
ERROR_TEXT = "ERROR E503: archive unavailable"
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n").decode()
# What Claude Code sends besides its messages (2.1.x): adaptive thinking, effort, context editing.
CLAUDE_CODE_FIELDS = {
    "thinking": {"type": "adaptive"},
    "output_config": {"effort": "low"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "metadata": {"user_id": "user-1"},
    "tools": [{"name": "Read", "description": "Read a file.", "cache_control": {"type": "ephemeral"},
               "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}],
}
SYSTEM = [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}]


@pytest.fixture(scope="module")
def anthropic_upstream() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gw(upstream: FakeUpstream, anthropic_upstream: FakeAnthropic) -> Iterator[httpx.Client]:
    raw = gateway_config(upstream.base_url)
    small = {"model_info": {"max_input_tokens": SMALL_WINDOW}, "mixpr": {"budget_tokens": 800}}
    raw["model_list"] += [
        model("claude", "x", anthropic_upstream.url, litellm_params={"model": "anthropic/claude-sonnet-4-5"}),
        model("claude-429", "x", anthropic_upstream.url, litellm_params={"model": "anthropic/status-429"}),
        model("claude-small", "x", anthropic_upstream.url,
              litellm_params={"model": "anthropic/claude-sonnet-4-5"}, **copy.deepcopy(small)),
    ]
    server = ServerThread(create_app(parse_config(raw))).start()
    headers = {"x-api-key": MASTER_KEY, "anthropic-version": "2023-06-01", "anthropic-beta": BETA}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
        yield client
    server.stop()


def _system_in_messages(model_name: str) -> dict[str, Any]:
    environment = "<env>Working directory: /work/project\nPlatform: linux</env>"
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is in this project?",
                                              "cache_control": {"type": "ephemeral"}}]},
                {"role": "system", "content": environment}]
    return {"model": model_name, "max_tokens": 256, "system": SYSTEM, "messages": messages,
            **CLAUDE_CODE_FIELDS}


def test_claude_codes_first_request_reaches_an_anthropic_model_as_sent(gw, anthropic_upstream):
    anthropic_upstream.requests.clear()
    body = _system_in_messages("claude")
    response = gw.post("/v1/messages?beta=true", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["content"] == [{"type": "text", "text": SHORT_TEXT}] or response.json()["content"]
    [seen] = anthropic_upstream.requests
    assert seen.path == "/v1/messages?beta=true"
    assert seen.headers["anthropic-beta"] == BETA and seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.headers["x-api-key"] != MASTER_KEY  # the deployment's key, never the client's
    assert seen.json == {**body, "model": "claude-sonnet-4-5"}


@pytest.mark.parametrize("stream", [False, True])
def test_claude_codes_first_request_reaches_a_chat_model(gw, upstream, stream):
    upstream.clear()
    body = {**_system_in_messages("gpt-test"), "stream": stream}
    response = gw.post("/v1/messages", json=body)
    assert response.status_code == 200, response.text
    [sent] = [r.json for r in upstream.received("echo")]
    system, user = sent["messages"]
    # The environment joins the leading system prompt: every chat template accepts one there.
    assert system["role"] == "system"
    environment = body["messages"][1]["content"]
    assert [p["text"] for p in system["content"]] == ["You are a coding agent.", environment]
    assert system["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert user == {"role": "user", "content": [{"type": "text", "text": "What is in this project?",
                                                 "cache_control": {"type": "ephemeral"}}]}
    assert sent["reasoning_effort"] == "low" and "context_management" not in sent


def _long_conversation(model_name: str) -> dict[str, Any]:
    """A thinking assistant that calls a tool, the failed call, a long text document and a PDF it
    sent instead, and the question."""
    document = haystack(600, seed=43)
    thinking = {"type": "thinking", "thinking": "The archive may hold it; search it.", "signature": SIGNATURE}
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/archive"}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Read the records and the archive."}]},
        {"role": "assistant", "content": [thinking, {"type": "text", "text": "Checking the archive."},
                                          tool_use]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
             "content": [{"type": "text", "text": ERROR_TEXT}]},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": document},
             "title": "Parish records", "citations": {"enabled": True},
             "cache_control": {"type": "ephemeral"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
             "title": "scan"},
            {"type": "text", "text": QUESTION}]},
    ]
    return {"model": model_name, "max_tokens": 256, "system": SYSTEM, "messages": messages}


def test_a_long_conversation_keeps_every_block_at_an_anthropic_model(gw, anthropic_upstream):
    anthropic_upstream.requests.clear()
    body = _long_conversation("claude-small")
    response = gw.post("/v1/messages", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-mixpr-action"] == "compressed"
    [seen] = anthropic_upstream.requests
    sent = seen.json
    assert sent["system"] == SYSTEM
    # Thinking (with its signature) and the tool call as sent; texts are compressible (cut or kept).
    thinking, text, tool_use = sent["messages"][1]["content"]
    assert [thinking, tool_use] == [body["messages"][1]["content"][k] for k in (0, 2)]
    assert text["type"] == "text" and sent["messages"][0]["content"][0]["type"] == "text"
    error, document, pdf, question = sent["messages"][2]["content"]
    assert error == body["messages"][2]["content"][0]  # is_error, and the short text in full
    # The document is still a document, with its title, citations and cache marker; its text is cut.
    original = body["messages"][2]["content"][1]
    assert {k: v for k, v in document.items() if k != "source"} == \
        {k: v for k, v in original.items() if k != "source"}
    # (Which passages survive is the multi-turn compressor's business, not this adapter's.)
    kept = document["source"]["data"]
    assert document["source"]["type"] == "text" and 0 < len(kept) < len(original["source"]["data"]) / 3
    assert kept.split()[0] in original["source"]["data"]
    assert [pdf, question] == body["messages"][2]["content"][2:]


def test_a_long_conversation_keeps_every_block_at_a_chat_model(gw, upstream):
    upstream.clear()
    body = _long_conversation("small")
    response = gw.post("/v1/messages", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-mixpr-action"] == "compressed"
    [sent] = [r.json for r in upstream.received("small") if not r.is_router_call]
    system, user, assistant, tool, last = sent["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    [call] = assistant["tool_calls"]
    assert call["id"] == "toolu_1" and json.loads(call["function"]["arguments"]) == {"file_path": "/archive"}
    assert assistant["reasoning_content"] == "The archive may hold it; search it."
    # The error flag as a marked text; the document as its title and (cut) text; the PDF as a file
    # part, never an image; the question as sent.
    assert tool == {"role": "tool", "tool_call_id": "toolu_1", "content": f"[tool error] {ERROR_TEXT}"}
    header, text, pdf, question = last["content"]
    assert header["text"] == "[document: Parish records]"
    assert 0 < len(text["text"]) < len(body["messages"][2]["content"][1]["source"]["data"]) / 3
    assert text["cache_control"] == {"type": "ephemeral"}
    assert pdf["type"] == "file" and pdf["file"]["file_data"] == f"data:application/pdf;base64,{PDF}"
    assert question["text"] == QUESTION


def test_search_results_and_content_documents_become_text_for_a_chat_model(gw, upstream):
    upstream.clear()
    search = {"type": "search_result", "source": "https://example.com/a", "title": "A page",
              "content": [{"type": "text", "text": "The vault opens at dawn."}]}
    pages = [{"type": "text", "text": "Page 1"}]
    document = {"type": "document", "source": {"type": "content", "content": pages}}
    content = [{"type": "tool_result", "tool_use_id": "toolu_9", "content": [search],
                "cache_control": {"type": "ephemeral"}}, document,
               {"type": "text", "text": "When does it open?"}]
    messages = [{"role": "user", "content": "Search."},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_9", "name": "search",
                                                   "input": {}}]},
                {"role": "user", "content": content}]
    response = gw.post("/v1/messages", json={"model": "gpt-test", "max_tokens": 16, "messages": messages})
    assert response.status_code == 200, response.text
    [sent] = [r.json for r in upstream.received("echo")]
    tool, user = sent["messages"][2:]
    text = "[search result: A page (https://example.com/a)]\n\nThe vault opens at dawn."
    assert tool["content"] == [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
    assert [p["text"] for p in user["content"]] == ["Page 1", "When does it open?"]


def test_an_unknown_block_reaches_an_anthropic_model_and_is_refused_for_a_chat_model(gw, upstream,
                                                                                 anthropic_upstream):
    block = {"type": "container_upload", "file_id": "file_1"}
    messages = [{"role": "user", "content": [block, {"type": "text", "text": "Run it."}]}]
    anthropic_upstream.requests.clear()
    response = gw.post("/v1/messages", json={"model": "claude", "max_tokens": 16, "messages": messages})
    assert response.status_code == 200, response.text
    assert anthropic_upstream.requests[0].json["messages"] == messages
    upstream.clear()
    response = gw.post("/v1/messages", json={"model": "gpt-test", "max_tokens": 16, "messages": messages})
    assert response.status_code == 400
    assert "messages.0.content.0" in response.json()["error"]["message"]
    assert upstream.received() == []


def test_an_anthropic_upstreams_error_and_stream_come_back_as_they_are(gw, anthropic_upstream):
    body = {"model": "claude", "max_tokens": 16, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    with gw.stream("POST", "/v1/messages", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    assert text.startswith("event: message_start") and "event: message_stop" in text


def test_an_anthropic_upstreams_refusal_comes_back_as_it_is(gw):
    for stream in (False, True):
        response = gw.post("/v1/messages", json={"model": "claude-429", "max_tokens": 16, "stream": stream,
                                                 "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 429 and response.headers["retry-after"] == "7"
        error = {"type": "rate_limit_error", "message": "Slow down."}
        assert response.json() == {"type": "error", "error": error}


def test_write_back_puts_gateway_additions_after_tool_results() -> None:
    body = {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "long output"},
        {"type": "text", "text": "next?"}]}]}
    shown = anthropic_blocks.view(body)
    tool, user = shown
    sent = [{**tool, "content": [{**tool["content"][0], "text": "output"}]},
            {**user, "content": [{"type": "text", "text": "EVIDENCE"}, *user["content"]]}]
    out = anthropic_blocks.write_back(body, sent)
    assert out["messages"][0]["content"] == [
        {"type": "tool_result", "tool_use_id": "t", "content": "output"},
        {"type": "text", "text": "EVIDENCE"}, {"type": "text", "text": "next?"}]
    assert body["messages"][0]["content"][0]["content"] == "long output"  # the client's body is untouched
    assert anthropic_blocks.write_back(body, shown) is body


def test_claude_codes_merged_steps_are_viewed_as_turns() -> None:
    """One assistant message with every step's text and call, one user message with every result
    (how Claude Code sends a tool loop): one turn per step, and the write-back is the identity."""
    calls = [{"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {"file_path": f"/f{n}"}}
             for n in range(3)]
    texts = [{"type": "text", "text": f"Reading file {n}."} for n in range(3)]
    results = [{"type": "tool_result", "tool_use_id": f"t{n}", "content": f"file {n}"} for n in range(3)]
    body = {"messages": [{"role": "user", "content": "Read the files."},
                         {"role": "assistant", "content": [*texts, *calls]},
                         {"role": "user", "content": results}]}
    shown = anthropic_blocks.view(body)
    assert [m["role"] for m in shown] == ["user", *["assistant", "tool"] * 3]
    steps = [m for m in shown if m["role"] == "assistant"]
    assert [[c["id"] for c in m["tool_calls"]] for m in steps] == [["t0"], ["t1"], ["t2"]]
    expected = [x for n in range(3) for x in (f"Reading file {n}.", f"file {n}")]
    assert [m["content"][0]["text"] for m in shown[1:]] == expected
    assert anthropic_blocks.write_back(body, shown) is body
