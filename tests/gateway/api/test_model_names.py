"""Every answer names the model the client asked for (issue 30), never the operator's upstream name
(nor a local model's file path): chat relayed and through LiteLLM, Responses, Messages to an OpenAI
model and relayed to an Anthropic one, legacy completions and embeddings, streamed or not.

The upstreams answer with their own names (``echo``, ``mode-cached``, ``claude-3-5-haiku-...``), so
an answer that passes them on fails here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread, model
from corpus import QUESTION, haystack
from fake_anthropic import FakeAnthropic
from fake_upstream import FakeUpstream

from gateway import create_app
from gateway.config import parse_config

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
HELLO = [{"role": "user", "content": "hello"}]
LONG = [{"role": "user", "content": haystack(600, seed=4) + "\n\n" + QUESTION}]


@pytest.fixture(scope="module")
def anthropic_upstream() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def url(upstream: FakeUpstream, anthropic_upstream: FakeAnthropic) -> Iterator[str]:
    small = {"model_info": {"max_input_tokens": 3000}, "mixpr": {"budget_tokens": 800}}
    claude = {"model": "anthropic/claude-3-5-haiku-20241022", "api_base": anthropic_upstream.url,
              "api_key": "sk-a"}
    config = {
        "model_list": [
            model("alias-relayed", "echo", upstream.base_url, **small),
            model("alias-litellm", "mode-cached", upstream.base_url, litellm_params={"temperature": 0.2}),
            {"model_name": "alias-claude", "litellm_params": claude},
        ],
        "mixpr_settings": {"router": "heuristic"},
        "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread",
                             "compression_workers": 1},
    }
    server = ServerThread(create_app(parse_config(config))).start()
    yield server.url
    server.stop()


def _names(value: Any) -> set[str]:
    """Every ``model`` field anywhere in a JSON value."""
    if isinstance(value, dict):
        found = {value["model"]} if isinstance(value.get("model"), str) else set()
        return found.union(*(_names(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_names(v) for v in value))
    return set()


def _answer_names(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    if not response.headers["content-type"].startswith("text/event-stream"):
        return _names(response.json())
    found: set[str] = set()
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            found |= _names(json.loads(line[5:]))
    return found


CASES = {
    "chat relayed": ("/v1/chat/completions", "alias-relayed", {"messages": HELLO}),
    "chat compressed": ("/v1/chat/completions", "alias-relayed", {"messages": LONG}),
    "chat litellm": ("/v1/chat/completions", "alias-litellm", {"messages": HELLO}),
    "responses": ("/v1/responses", "alias-relayed", {"input": "hello"}),
    "messages to chat": ("/v1/messages", "alias-litellm", {"messages": HELLO, "max_tokens": 20}),
    "messages relayed": ("/v1/messages", "alias-claude", {"messages": HELLO, "max_tokens": 20}),
    "completions": ("/v1/completions", "alias-litellm", {"prompt": "hello"}),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_answer_names_the_model_asked_for(url: str, case: str, stream: bool) -> None:
    path, name, body = CASES[case]
    body = {"model": name, **body, "stream": stream}
    response = httpx.post(url + path, json=body, headers=AUTH, timeout=60)
    assert _answer_names(response) == {name}


def test_embeddings_name_the_model_asked_for(url: str) -> None:
    body = {"model": "alias-litellm", "input": "hi"}
    response = httpx.post(url + "/v1/embeddings", json=body, headers=AUTH)
    assert _answer_names(response) == {"alias-litellm"}
