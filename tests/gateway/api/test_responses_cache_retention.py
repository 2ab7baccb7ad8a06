"""``/v1/responses`` keeps what the client asked of the provider's cache (issue 57, defect 8):
``prompt_cache_retention`` reaches a chat upstream as ``prompt_cache_key`` always did, through the raw
relay and through LiteLLM's path."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from answering_upstream import AnsweringUpstream, json_answer
from conftest import MASTER_KEY, ServerThread

from gateway import create_app
from gateway.config import parse_config

CHOICE = {"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}
COMPLETION = {"id": "c1", "object": "chat.completion", "created": 1, "model": "up", "choices": [CHOICE],
              "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, AnsweringUpstream]]:
    scripted = AnsweringUpstream().start()
    scripted.script("up-relay", json_answer(200, {**COMPLETION, "model": "up-relay"}))
    scripted.script("up-litellm", json_answer(200, {**COMPLETION, "model": "up-litellm"}))
    base = scripted.base_url
    models = [{"model_name": name, "litellm_params": {"model": f"openai/{upstream}", "api_base": base,
                                                      "api_key": "sk-test-000000", **extra}}
              for name, upstream, extra in (("relayed", "up-relay", {}),
                                            ("translated", "up-litellm", {"extra_headers": {"x-a": "b"}}))]
    config = {"model_list": models, "general_settings": {"master_key": MASTER_KEY, "compression_workers": 1}}
    server = ServerThread(create_app(parse_config(config))).start()
    yield server.url, scripted
    server.stop()
    scripted.stop()


@pytest.mark.parametrize("model", ["relayed", "translated"])
def test_prompt_cache_retention_reaches_a_chat_upstream(served: tuple[str, AnsweringUpstream],
                                                        model: str) -> None:
    url, scripted = served
    body = {"model": model, "input": "hello", "prompt_cache_retention": "24h", "prompt_cache_key": "k-1"}
    response = httpx.post(url + "/v1/responses", json=body, headers={"Authorization": f"Bearer {MASTER_KEY}"},
                          timeout=60)
    assert response.status_code == 200, response.text
    sent = scripted.bodies[-1]
    assert sent.get("prompt_cache_retention") == "24h", sent
