"""``prompt_cache_key`` (``gateway.core.cache_key``): what the OpenAI-style upstream receives.

- two conversations, each continued, reach it with two stable, distinct keys that do not show
  their text; relayed and through LiteLLM alike;
- a client's own key arrives unchanged (chat, Responses);
- a session the client names (Claude Code's header, Codex's, a generic one) decides the key, over
  the conversation's start; an Anthropic Messages request to an OpenAI model included;
- ``general_settings.prompt_cache_key: false`` sets none; a non-OpenAI upstream gets none.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread, model
from fake_anthropic import FakeAnthropic
from fake_upstream import FakeUpstream

from gateway import create_app
from gateway.config import parse_config

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
MODELS = {"relayed": "echo", "litellm": "mode-cached"}  # model_name -> the upstream's name for it


def _config(upstream: FakeUpstream, anthropic_url: str, **general: Any) -> dict[str, Any]:
    claude = {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-3-5-haiku-20241022",
                                                         "api_base": anthropic_url, "api_key": "sk-a"}}
    litellm = model("litellm", "mode-cached", upstream.base_url, litellm_params={"temperature": 0})
    return {"model_list": [model("relayed", "echo", upstream.base_url), litellm, claude],
            "mixpr_settings": {"router": "heuristic"},
            "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread",
                                 "compression_workers": 1, **general}}


@pytest.fixture(scope="module")
def fake_anthropic() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def url(upstream: FakeUpstream, fake_anthropic: FakeAnthropic) -> Iterator[str]:
    server = ServerThread(create_app(parse_config(_config(upstream, fake_anthropic.url)))).start()
    yield server.url
    server.stop()


def _key(upstream: FakeUpstream, url: str, path: str, body: dict[str, Any],
         headers: dict[str, str] | None = None) -> Any:
    """The prompt_cache_key the upstream received for this request (None: no key)."""
    before = len(upstream.received(MODELS[body["model"]]))
    response = httpx.post(url + path, json=body, headers={**AUTH, **(headers or {})}, timeout=30)
    assert response.status_code == 200, response.text
    [sent] = upstream.received(MODELS[body["model"]])[before:]  # the tests of this module run one by one
    return sent.json.get("prompt_cache_key", None)


def _conversation(first: str, turns: int) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": first}]
    for n in range(turns):
        messages += [{"role": "assistant", "content": f"answer {n}"},
                     {"role": "user", "content": f"more {n}"}]
    return messages


@pytest.mark.parametrize("name", sorted(MODELS))
def test_two_conversations_get_two_stable_distinct_keys(url: str, upstream: FakeUpstream, name: str) -> None:
    keys = {}
    for first in ("Tell me about lighthouses.", "Tell me about volcanoes."):
        bodies = [{"model": name, "messages": _conversation(first, turns)} for turns in (0, 1, 2)]
        seen = {_key(upstream, url, "/v1/chat/completions", body) for body in bodies}
        assert len(seen) == 1  # stable as the conversation grows
        keys[first] = seen.pop()
    assert len(set(keys.values())) == 2
    for key in keys.values():
        assert key.startswith("mixpr-") and "lighthouse" not in key and "volcano" not in key


def test_the_same_on_both_paths(url: str, upstream: FakeUpstream) -> None:
    body = {"messages": _conversation("Same start.", 0)}
    keys = {_key(upstream, url, "/v1/chat/completions", {"model": name, **body}) for name in MODELS}
    assert len(keys) == 1


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_clients_own_key_arrives_unchanged(url: str, upstream: FakeUpstream, name: str) -> None:
    chat = {"model": name, "messages": _conversation("x", 0), "prompt_cache_key": "client-key-1"}
    assert _key(upstream, url, "/v1/chat/completions", chat) == "client-key-1"
    responses = {"model": name, "input": "x", "prompt_cache_key": "client-key-2"}
    assert _key(upstream, url, "/v1/responses", responses) == "client-key-2"


@pytest.mark.parametrize("header", ["x-claude-code-session-id", "session_id", "session-id", "x-session-id"])
def test_a_named_session_decides_the_key(url: str, upstream: FakeUpstream, header: str) -> None:
    def key(first: str, session: str) -> str:
        body = {"model": "relayed", "messages": _conversation(first, 0)}
        return _key(upstream, url, "/v1/chat/completions", body, {header: session})

    assert key("one start", "session-a") == key("another start", "session-a")
    assert key("one start", "session-a") != key("one start", "session-b")
    plain = {"model": "relayed", "messages": _conversation("one start", 0)}
    unnamed = _key(upstream, url, "/v1/chat/completions", plain)
    assert unnamed != key("one start", "session-a")


def test_claude_code_to_an_openai_model_keeps_its_session(url: str, upstream: FakeUpstream) -> None:
    def key(first: str, session: str) -> str:
        body = {"model": "relayed", "max_tokens": 20, "messages": [{"role": "user", "content": first}]}
        return _key(upstream, url, "/v1/messages", body, {"x-claude-code-session-id": session})

    assert key("first task", "cc-1") == key("a new turn", "cc-1") != key("first task", "cc-2")


def test_switched_off_no_key(upstream: FakeUpstream, fake_anthropic: FakeAnthropic) -> None:
    config = _config(upstream, fake_anthropic.url, prompt_cache_key=False)
    server = ServerThread(create_app(parse_config(config))).start()
    try:
        body = {"model": "relayed", "messages": _conversation("x", 0)}
        assert _key(upstream, server.url, "/v1/chat/completions", body) is None
    finally:
        server.stop()


def test_an_anthropic_upstream_gets_no_key(url: str, fake_anthropic: FakeAnthropic) -> None:
    body = {"model": "claude", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(url + "/v1/messages", json=body, headers={**AUTH, "x-claude-code-session-id": "s"})
    assert response.status_code == 200
    assert "prompt_cache_key" not in fake_anthropic.requests[-1].json
