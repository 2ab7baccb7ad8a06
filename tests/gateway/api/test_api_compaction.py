"""Provider-side compaction passes through: OpenAI's ``/v1/responses/compact`` and Anthropic's context
management (``context_management``, ``compaction`` blocks, ``usage.iterations``), in recorded shapes.

The upstreams answer as the providers document: ``fake_upstream.COMPACTED`` (OpenAI's API reference
for ``POST /v1/responses/compact``) and ``fake_anthropic.COMPACTION_BLOCK`` / ``COMPACTED_USAGE``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread
from corpus import haystack
from fake_anthropic import COMPACTED_USAGE, COMPACTION_BLOCK, FakeAnthropic
from fake_upstream import COMPACTED, ODD_USAGE, FakeUpstream

from gateway import create_app
from gateway.config import parse_config

# Codex's compaction request: its instructions, and the history to compact (Responses items).
COMPACT_BODY = {
    "model": "gpt",
    "instructions": "You are Codex. Summarise the conversation so the work can go on.",
    "input": [
        {"role": "user", "content": "Create a simple landing page for a dog petting café."},
        {"id": "msg_001", "type": "message", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Below is a single "
                      "file, ready-to-use landing page for a dog petting café:..."}]},
    ],
}
CONTEXT_MANAGEMENT = {"edits": [{"type": "compact_20260112",
                                 "trigger": {"type": "input_tokens", "value": 150000}}]}
LONG = haystack(600)  # ~11k tokens: over the small model's window


@pytest.fixture(scope="module")
def anthropic_upstream() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def service(upstream: FakeUpstream, anthropic_upstream: FakeAnthropic) -> Iterator[httpx.Client]:
    def entry(name: str, model: str, base: str, window: int = 200_000) -> dict[str, Any]:
        return {"model_name": name, "model_info": {"max_input_tokens": window},
                "litellm_params": {"model": model, "api_base": base, "api_key": "sk-up"},
                "mixpr": {"router": "heuristic", "budget_tokens": 800}}
    odd = [entry(f"odd-{kind}", f"openai/mode-usage-{kind}", upstream.base_url) for kind in ODD_USAGE]
    config = {"model_list": [*odd, entry("gpt", "openai/echo", upstream.base_url),
                             entry("no-compact", "openai/mode-404", upstream.base_url),
                             entry("wrong-key", "openai/mode-openai-401", upstream.base_url),
                             entry("retired", "openai/ft:gpt-4o:acme:retired", upstream.base_url),
                             entry("claude", "anthropic/compacting", anthropic_upstream.url, 3000)],
              "general_settings": {"master_key": MASTER_KEY, "compression_workers": 1,
                                   "compression_executor": "thread"}}
    server = ServerThread(create_app(parse_config(config))).start()
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as c:
        yield c
    server.stop()


@pytest.mark.parametrize("path", ["/v1/responses/compact", "/responses/compact"])
def test_compact_is_relayed_to_an_openai_upstream(service: httpx.Client, upstream: FakeUpstream,
                                                  path: str) -> None:
    upstream.clear()
    response = service.post(path, json=COMPACT_BODY)
    assert response.status_code == 200 and response.json() == COMPACTED
    [seen] = [r for r in upstream.received() if r.path.endswith("/responses/compact")]
    assert seen.path == "/v1/responses/compact" and seen.headers["authorization"] == "Bearer sk-up"
    assert seen.json == {**COMPACT_BODY, "model": "echo"}  # only the model's name changed


@pytest.mark.parametrize("model, why", [("claude", "its provider has no compaction endpoint"),
                                        ("no-compact", "answered 404"), ("nope", "does not exist")])
def test_compact_without_an_upstream_for_it_is_a_clear_400(service: httpx.Client, model: str,
                                                           why: str) -> None:
    """Never a 404 (which Codex reads as a broken endpoint): a 400 in the Responses error shape, which
    names the client's alias, never the model it routes to (``anthropic/compacting``)."""
    response = service.post("/v1/responses/compact", json={**COMPACT_BODY, "model": model})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "model" and why in error["message"]
    assert "compacting" not in response.text


def test_compact_maps_a_refused_key_as_the_chat_does(service: httpx.Client) -> None:
    """OpenAI's 401 quotes part of the operator's key: the gateway's own 502, as on the chat path."""
    for path, body in (("/v1/responses/compact", COMPACT_BODY),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
        response = service.post(path, json={**body, "model": "wrong-key"})
        assert response.status_code == 502, response.text
        assert response.json()["error"]["code"] == "upstream_auth_failed" and "wxyz" not in response.text


def test_compact_of_a_model_the_upstream_does_not_know_is_a_404_naming_the_alias(
        service: httpx.Client) -> None:
    """A 404 about the model is not a missing endpoint (Codex would stop compacting for good)."""
    response = service.post("/v1/responses/compact", json={**COMPACT_BODY, "model": "retired"})
    assert response.status_code == 404, response.text
    assert "compaction endpoint" not in response.text and "acme" not in response.text
    assert "`retired`" in response.json()["error"]["message"]


@pytest.mark.parametrize("kind", sorted(ODD_USAGE))
def test_a_billed_compaction_with_an_odd_usage_still_reaches_the_client(service: httpx.Client,
                                                                        kind: str) -> None:
    """The upstream has billed it: a usage the metrics cannot read is logged, never a 500."""
    response = service.post("/v1/responses/compact", json={**COMPACT_BODY, "model": f"odd-{kind}"})
    assert response.status_code == 200, response.text
    assert response.json()["usage"] == ODD_USAGE[kind]


def test_compact_bad_bodies_are_400(service: httpx.Client) -> None:
    assert service.post("/v1/responses/compact", json=[1]).status_code == 400
    assert service.post("/v1/responses/compact", json={"input": []}).json()["error"]["param"] == "model"
    assert httpx.post(str(service.base_url) + "/v1/responses/compact", json=COMPACT_BODY).status_code == 401


def _messages_request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "claude", "max_tokens": 200, "context_management": CONTEXT_MANAGEMENT,
            "messages": messages}


def test_anthropic_compaction_blocks_and_context_management_pass_byte_exact(
        service: httpx.Client, anthropic_upstream: FakeAnthropic) -> None:
    """A compacted conversation sent on: its ``compaction`` block (a summary the provider signed) is
    never compressed, and ``context_management`` reaches the provider as sent, while the long text
    after it is compressed to fit."""
    messages = [{"role": "user", "content": "Find the lighthouse code in the files."},
                {"role": "assistant", "content": [COMPACTION_BLOCK, {"type": "text", "text": "Reading on."}]},
                {"role": "user", "content": LONG + "\n\nWhat is the code?"}]
    anthropic_upstream.requests.clear()
    response = service.post("/v1/messages", json=_messages_request(messages))
    assert response.status_code == 200, response.text
    assert response.headers["x-mixpr-action"] == "compressed"
    [seen] = [r for r in anthropic_upstream.requests if r.path.startswith("/v1/messages")]
    assert seen.json["context_management"] == CONTEXT_MANAGEMENT
    assert seen.json["messages"][1]["content"][0] == COMPACTION_BLOCK
    # The block's own bytes (in the body's compact JSON): no key moved, nothing re-escaped.
    assert json.dumps(COMPACTION_BLOCK, separators=(",", ":"), ensure_ascii=False).encode() in seen.raw_body
    assert len(seen.json["messages"][2]["content"]) < len(LONG) / 2


def test_anthropic_answer_keeps_its_compaction_block_and_iterations(service: httpx.Client) -> None:
    response = service.post("/v1/messages", json=_messages_request([{"role": "user", "content": "Go on."}]))
    answer = response.json()
    assert answer["content"][0] == COMPACTION_BLOCK and answer["usage"] == COMPACTED_USAGE


def test_billed_iterations_are_counted_in_the_metrics(service: httpx.Client) -> None:
    """The top-level usage is the last iteration's alone: the compaction's cache reads and writes are
    billed too, and counted."""
    def cached(kind: str) -> float:
        text = service.get("/metrics").text
        name = f'mixpr_upstream_cached_tokens_total{{kind="{kind}",model="claude"}}'
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))
    read, written = cached("read"), cached("written")
    service.post("/v1/messages", json=_messages_request([{"role": "user", "content": "Once more."}]))
    iterations = COMPACTED_USAGE["iterations"]
    assert cached("read") - read == sum(i["cache_read_input_tokens"] for i in iterations)
    assert cached("written") - written == sum(i["cache_creation_input_tokens"] for i in iterations)


def test_compact_usage_is_counted(service: httpx.Client) -> None:
    def read() -> float:
        text = service.get("/metrics").text
        name = 'mixpr_upstream_cached_tokens_total{kind="read",model="gpt"}'
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))
    before = read()
    assert service.post("/v1/responses/compact", json=COMPACT_BODY).status_code == 200
    assert read() - before == COMPACTED["usage"]["input_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("item", [COMPACTED["output"][1], {"type": "compaction_trigger"}])
def test_responses_compaction_items_are_refused_clearly(service: httpx.Client, upstream: FakeUpstream,
                                                        item: dict[str, Any]) -> None:
    """The gateway serves /v1/responses over chat completions: an encrypted summary (or a request to
    compact) cannot reach a chat upstream, and dropping it would lose the conversation silently."""
    upstream.clear()
    body = {"model": "gpt", "input": [{"role": "user", "content": "Go on."}, item]}
    response = service.post("/v1/responses", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "input[1]" and error["code"] == "unsupported_compaction"
    assert upstream.received() == []
