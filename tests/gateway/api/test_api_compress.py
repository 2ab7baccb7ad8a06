"""``POST /v1/compress``: the compression service contract of LiteLLM's ``guardrail: headroom``.

LiteLLM (1.108 and later, ``litellm/proxy/guardrails/guardrail_hooks/headroom``) posts
``{"messages": [...], "model": "..."}`` with ``Authorization: Bearer <api_key>`` (1.110 adds
``"config": {"mode": "ccr"}`` and ``x-headroom-affinity``: ``LITELLM_1110``) and takes
``{"messages": [...]}`` back only when it holds as many messages as it sent (it puts them back
among the rows it held back by position). It holds back the system rows, the last user row, every
assistant row and the tool results of the newest exchange, and sends all-text content as strings:
what arrives is a conversation's older user messages and tool results, without their calls.
These tests send those shapes to a running gateway; the path through a real LiteLLM proxy is
``tests/gateway/plugins/test_litellm_headroom.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agent_loops import chat_loop
from conftest import MASTER_KEY, ServerThread
from corpus import NEEDLE, QUESTION, haystack

from gateway import create_app
from gateway.config import parse_config
from gateway.core.prepare import Preparer
from gateway.errors import Overloaded
from mixpr.tokens import count_tokens

PATH = "/v1/compress"
FORMS = {"min_tokens": 400, "keep_tokens": 150, "keep": 0.1, "first_sight": "always"}
DOCUMENT = haystack(600) + "\n\n" + QUESTION  # ~11k tokens


def _config(upstream: str) -> dict[str, Any]:
    def entry(name: str, window: int, **mixpr: Any) -> dict[str, Any]:
        return {"model_name": name, "model_info": {"max_input_tokens": window},
                "litellm_params": {"model": f"openai/{name}", "api_base": upstream, "api_key": "sk-up"},
                "mixpr": {"router": "heuristic", **mixpr}}
    return {"model_list": [entry("agent", 200_000, prefix=FORMS), entry("small", 3000, budget_tokens=800),
                           entry("agent-small", 5000, prefix={**FORMS, "reset_min_tokens": 100}),
                           entry("agent-marked", 200_000, prefix={**FORMS, "breakpoint": True})],
            "general_settings": {"master_key": MASTER_KEY, "compression_workers": 1,
                                 "compression_executor": "thread"}}


@pytest.fixture(scope="module")
def service(upstream: Any) -> Iterator[httpx.Client]:
    server = ServerThread(create_app(parse_config(_config(upstream.base_url)))).start()
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {MASTER_KEY}"},
                      timeout=120) as http:
        yield http
    server.stop()


def held_back(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows LiteLLM's headroom guardrail sends (``_protected_indices``): not the system rows,
    the last user row, any assistant row, nor the newest assistant's tool results."""
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    last_assistant = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    newest = {c["id"] for c in (messages[last_assistant].get("tool_calls") or ()) if last_assistant >= 0}
    return [m for i, m in enumerate(messages) if m["role"] not in ("system", "assistant")
            and i != last_user and m.get("tool_call_id") not in newest]


def compress(http: httpx.Client, messages: list[dict[str, Any]], model: str = "agent",
             **extra: Any) -> tuple[httpx.Response, dict[str, Any]]:
    body = {"messages": messages, "model": model, "config": {"mode": "ccr"}, **extra}
    response = http.post(PATH, json=body)
    assert response.status_code == 200, response.text
    return response, response.json()


def test_a_long_history_comes_back_compressed_row_for_row(service: httpx.Client) -> None:
    """A pasted document and a long tool output (what LiteLLM sends of a longer conversation): the
    same rows in the same roles, only their text shorter, and what was saved in the body and headers."""
    messages = [{"role": "user", "content": DOCUMENT},
                {"role": "tool", "tool_call_id": "call_1", "content": chat_loop(1)[0][-1]["content"]}]
    response, body = compress(service, messages, model="small")
    out = body["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in out] == [(m["role"], m.get("tool_call_id"))
                                                                  for m in messages]
    assert all(len(a["content"]) < len(b["content"]) / 2 for a, b in zip(out, messages, strict=True))
    assert NEEDLE in out[0]["content"] or QUESTION in out[0]["content"]
    before, after = body["tokens_before"], body["tokens_after"]
    assert after < before / 2 and body["tokens_saved"] == before - after
    assert body["compression_ratio"] == pytest.approx(after / before, abs=1e-3)
    assert response.headers["x-mixpr-action"] == "compressed"
    assert int(response.headers["x-mixpr-original-tokens"]) == before
    assert int(response.headers["x-mixpr-compressed-tokens"]) == after
    assert "ccr_hashes" not in body  # no retrieval tool: LiteLLM injects one only for hashes


def test_an_agent_loop_held_back_as_litellm_does_only_appends(service: httpx.Client) -> None:
    """Ten steps of a coding agent, each sent as LiteLLM sends it (tool results without their calls):
    every step gets back the previous step's rows byte for byte, then its new ones, each cut once."""
    answers: list[list[dict[str, Any]]] = []
    for step, messages in enumerate(chat_loop(11)[1:], 1):
        sent = held_back(messages)
        assert len(sent) == step
        response, body = compress(service, sent)
        out = body["messages"]
        assert len(out) == len(sent) and all(m["role"] == "tool" for m in out)
        assert [m["tool_call_id"] for m in out] == [m["tool_call_id"] for m in sent]
        if answers:
            assert out[: len(answers[-1])] == answers[-1], f"step {step} changed an earlier row"
        assert "omitted" in out[-1]["content"] and len(out[-1]["content"]) < len(sent[-1]["content"]) / 2
        assert response.headers["x-mixpr-action"] == "compressed"
        answers.append(out)


async def _overloaded(*args: object, **kwargs: object) -> None:
    raise Overloaded("The compression queue is full; retry shortly.", retry_after=1)


def test_a_server_fault_lets_the_rows_through(service: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """MixPR failing is no reason to fail the user's request (LiteLLM's default ``fail_closed`` would
    answer a 5xx with a 502): the rows come back as sent, and the header says why."""
    monkeypatch.setattr(Preparer, "prepare", _overloaded)
    messages = [{"role": "user", "content": DOCUMENT}, {"role": "user", "content": "Thanks."}]
    response, body = compress(service, messages, model="small")
    assert body["messages"] == messages
    assert response.headers["x-mixpr-action"] == "passthrough"
    assert response.headers["x-mixpr-error"] == "overloaded"
    # the documented fields all the same (LiteLLM logs "?" for a missing one): nothing saved
    assert body["tokens_before"] == body["tokens_after"] > 1000 and body["tokens_saved"] == 0
    assert body["compression_ratio"] == 1.0 and body["transforms_applied"] == []


@pytest.mark.parametrize("parallel", [False, True], ids=["one call a step", "two calls a step"])
def test_a_reset_on_held_back_rows_is_reported(service: httpx.Client, parallel: bool) -> None:
    """LiteLLM sends no assistant rows, so the previous request is the rows less the newest exchange:
    a step whose answer changes a row given before says ``x-mixpr-reset: true``, and only such a step."""
    answers: list[list[dict[str, Any]]] = []
    reported = []
    for messages in chat_loop(8 if parallel else 12, parallel=parallel)[1:]:
        response, body = compress(service, held_back(messages), model="agent-small", max_tokens=200)
        out = body["messages"]
        reported.append(response.headers["x-mixpr-reset"] == "true")
        if answers:
            changed = out[: len(answers[-1])] != answers[-1]
            assert reported[-1] == changed, (len(answers), reported[-1], changed)
        answers.append(out)
    assert any(reported), "the small window never reset: the test shows nothing"


@pytest.mark.parametrize("rows", ["held back", "whole"])
def test_no_breakpoint_is_added_to_rows_that_go_back_among_held_back_ones(service: httpx.Client,
                                                                         rows: str) -> None:
    """``prefix.breakpoint: true`` marks the previous request's last message on the proxy path. Here the
    rows go back among rows the caller held back, whose own breakpoints (LiteLLM's, up to Anthropic's
    4) this request cannot count: no row gains one, and none changes shape (a string stays a string)."""
    for messages in chat_loop(5)[1:]:
        sent = held_back(messages) if rows == "held back" else messages
        _, body = compress(service, sent, model="agent-marked")
        out = body["messages"]
        assert "cache_control" not in str(out)
        assert [type(m.get("content")) for m in out] == [type(m.get("content")) for m in sent]


def test_a_text_alone_tells_no_caller_whether_another_sent_it(service: httpx.Client) -> None:
    """Issue 47's suspicion: ``x-mixpr-new-forms: 0`` says a row's form was found, computed before. A
    form is a function of the row, what it answers and the task, so a caller who only has a text
    (a file, a log) learns nothing of whether another conversation sent it: under its own task the
    form is new. Only a caller who repeats the whole conversation (and so knows it) finds it."""
    tool = {"role": "tool", "tool_call_id": "call_1", "content": chat_loop(1)[0][-1]["content"]}
    first = [{"role": "user", "content": "Find where the retry budget is set and halve it."}, tool]
    response, _ = compress(service, first)
    assert int(response.headers["x-mixpr-new-forms"]) >= 1
    probe = [{"role": "user", "content": "Summarise this file for a newcomer."}, tool]
    response, _ = compress(service, probe)
    assert int(response.headers["x-mixpr-new-forms"]) >= 1
    response, _ = compress(service, first)  # the same conversation again: found
    assert response.headers["x-mixpr-new-forms"] == "0"


def test_short_history_comes_back_as_sent(service: httpx.Client) -> None:
    messages = [{"role": "user", "content": "Look the falcon up."},
                {"role": "tool", "tool_call_id": "t1", "content": "ERROR E503: archive unavailable"}]
    response, body = compress(service, messages)
    assert body["messages"] == messages and body["tokens_before"] == body["tokens_after"]
    assert body["tokens_saved"] == 0 and response.headers["x-mixpr-action"] == "passthrough"


def test_a_full_conversation_keeps_its_system_and_calls(service: httpx.Client) -> None:
    """Another gateway may send the whole conversation: calls, system and the question pass as sent."""
    messages = chat_loop(3)[-1] + [{"role": "user", "content": "Now fix it."}]
    _, body = compress(service, messages)
    out = body["messages"]
    assert [m["role"] for m in out] == [m["role"] for m in messages]
    for a, b in zip(out, messages, strict=True):
        if b["role"] != "tool":
            assert a == b
    assert all("omitted" in m["content"] for m in out if m["role"] == "tool")


def test_switches_and_a_known_model_and_the_key(service: httpx.Client) -> None:
    messages = [{"role": "user", "content": DOCUMENT}, {"role": "user", "content": "And?"}]
    body = {"messages": messages, "model": "small"}
    off = service.post(PATH, json=body, headers={"x-mixpr-enabled": "false"})
    assert off.status_code == 200 and off.json()["messages"] == messages
    unknown = service.post(PATH, json={**body, "model": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    url = str(service.base_url) + PATH
    assert httpx.post(url, json=body).status_code == 401
    assert httpx.post(url, json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401


@pytest.mark.parametrize("body, param", [
    ([1], None),
    ({"model": "small"}, "messages"),
    ({"model": "small", "messages": []}, "messages"),
    ({"model": "small", "messages": "hi"}, "messages"),
    ({"model": "small", "messages": [{"content": "hi"}]}, "messages[0]"),
    ({"model": "small", "messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ({"model": "small", "messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": 3, "messages": [{"role": "user", "content": "hi"}]}, "model"),
])
def test_bad_input_is_a_clear_400(service: httpx.Client, body: Any, param: str | None) -> None:
    response = service.post(PATH, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error.get("param") == param


# LiteLLM 1.110.2's request, as its ``HeadroomGuardrail._call_compress`` builds it (read from the
# 1.110.2 wheel, whose [proxy] extra does not install here): the rows and the model, ``config.mode``
# "ccr" (``ccr_retrieval`` defaults to true), and its headers: the key, and the affinity (sha256 hex
# of ``["headroom-affinity-v1", ["key", <hashed key>], <session id>]``) when the caller has a session.
LITELLM_1110 = {"body": {"config": {"mode": "ccr"}},
                "headers": {"Content-Type": "application/json", "Authorization": f"Bearer {MASTER_KEY}",
                            "x-headroom-affinity": "9f2c" * 16}}


def test_litellm_1110_asks_ccr_and_gets_lossy_inline(service: httpx.Client) -> None:
    """No retrieval is served: ``ccr`` is answered as ``lossy_inline`` (text kept in place, no marker),
    never with ``ccr_hashes``, so LiteLLM offers the model no retrieval tool; the header says so."""
    messages = [{"role": "user", "content": DOCUMENT}, {"role": "user", "content": "Thanks."}]
    body = {"messages": messages, "model": "small", **LITELLM_1110["body"]}
    response = service.post(PATH, json=body, headers=LITELLM_1110["headers"])
    assert response.status_code == 200, response.text
    answer = response.json()
    assert "ccr_hashes" not in answer and response.headers["x-mixpr-mode-served"] == "lossy_inline"
    assert len(answer["messages"][0]["content"]) < len(DOCUMENT) / 2 and answer["tokens_saved"] > 0
    assert "hash=" not in answer["messages"][0]["content"]


@pytest.mark.parametrize("mode", ["lossy_inline", "lossless_then_lossy", None])
def test_every_mode_is_served_alike(service: httpx.Client, mode: str | None) -> None:
    messages = [{"role": "user", "content": DOCUMENT}, {"role": "user", "content": "Thanks."}]
    _, ccr = compress(service, messages, model="small")
    response, body = compress(service, messages, model="small", config={"mode": mode})
    assert body == ccr and response.headers.get("x-mixpr-mode-served") == ("lossy_inline" if mode else None)


@pytest.mark.parametrize("config, param", [("ccr", "config"), ({"mode": "magic"}, "config.mode"),
                                           ({"mode": 3}, "config.mode")])
def test_a_config_no_caller_sends_is_a_400(service: httpx.Client, config: Any, param: str) -> None:
    body = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "config": config}
    response = service.post(PATH, json=body)
    assert response.status_code == 400 and response.json()["error"]["param"] == param


def test_tokens_are_counted_for_the_model(service: httpx.Client) -> None:
    """``tokens_before`` is the model's count of what was sent (the headers' figure)."""
    messages = [{"role": "user", "content": DOCUMENT}, {"role": "user", "content": "Thanks."}]
    _, body = compress(service, messages, model="small")
    assert body["tokens_before"] >= count_tokens(DOCUMENT, "gpt-4o-mini")
