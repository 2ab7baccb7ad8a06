"""Counting in the target model's tokens (issue #16, scenario 9), over real HTTP.

tiktoken is exact for the OpenAI models it knows; any other model's count is raised by
``token_margin`` (0.25 unless configured), so a prompt OpenAI's encoding puts just under the window
is compressed for it rather than refused by its provider. The embedded model, counted by its own
server, is tested end to end in ``tests/e2e/test_embedded_model.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread, closed_port, gateway_config, model
from corpus import QUESTION, haystack

from gateway import create_app
from gateway.config import parse_config
from gateway.core.model_tokens import DEFAULT_MARGIN, ServerCounter
from mixpr.tokens import count_tokens

WINDOW = 3000
REPLY = 64
FRAMING = 4 + 3  # one message, and the reply's priming


@pytest.fixture(scope="module")
def gateway(upstream: Any) -> Iterator[ServerThread]:
    """Three models of the same 3,000-token window on the recording upstream: one tiktoken knows, one
    it does not, and one with a configured margin. MixPR in threads: these prompts are small."""
    raw = gateway_config(upstream.base_url)
    window = {"max_input_tokens": WINDOW}
    raw["model_list"] += [model("openai-model", "gpt-4o-mini", upstream.base_url, model_info=window),
                          model("other-model", "qwen-7b", upstream.base_url, model_info=window),
                          model("wide-margin", "qwen-7b", upstream.base_url, model_info=window,
                                mixpr={"token_margin": 1.0})]
    raw["general_settings"]["compression_executor"] = "thread"
    server = ServerThread(create_app(parse_config(raw))).start()
    yield server
    server.stop()


def ask(gateway: ServerThread, name: str, text: str) -> httpx.Response:
    body = {"model": name, "max_tokens": REPLY, "messages": [{"role": "user", "content": text}]}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=60,
                          headers={"Authorization": f"Bearer {MASTER_KEY}"})
    assert response.status_code == 200, response.text
    return response


def near_the_window() -> str:
    """A prompt that cl100k puts just under the window with the reply kept free."""
    text = f"{haystack(150, seed=3)}\n\n{QUESTION}"
    tokens = count_tokens(text, "gpt-4o-mini") + FRAMING
    assert WINDOW - REPLY - 200 < tokens <= WINDOW - REPLY, tokens
    return text


def test_an_openai_model_is_counted_exactly_and_a_prompt_that_fits_passes(gateway):
    text = near_the_window()
    response = ask(gateway, "openai-model", text)
    assert response.headers["x-mixpr-action"] == "passthrough"
    assert int(response.headers["x-mixpr-original-tokens"]) == count_tokens(text, "gpt-4o-mini") + FRAMING


def test_another_models_count_has_the_margin_so_the_same_prompt_is_compressed(gateway, upstream):
    text = near_the_window()
    upstream.clear()
    response = ask(gateway, "other-model", text)
    assert response.headers["x-mixpr-action"] == "compressed"
    estimate = math.ceil(count_tokens(text, "qwen-7b") * (1 + DEFAULT_MARGIN)) + FRAMING
    assert int(response.headers["x-mixpr-original-tokens"]) == estimate
    assert int(response.headers["x-mixpr-compressed-tokens"]) <= WINDOW - REPLY
    (sent,) = [r.json for r in upstream.received("qwen-7b")]
    kept = sent["messages"][0]["content"]
    # What was sent, raised by the margin, fits the window: room for a tokenizer 25% finer than cl100k.
    assert math.ceil(count_tokens(kept, "qwen-7b") * (1 + DEFAULT_MARGIN)) + FRAMING <= WINDOW - REPLY


def test_the_margin_is_configurable_per_model(gateway):
    text = f"{haystack(60, seed=4)}\n\n{QUESTION}"
    response = ask(gateway, "wide-margin", text)
    assert response.headers["x-mixpr-action"] == "passthrough"
    assert int(response.headers["x-mixpr-original-tokens"]) == 2 * count_tokens(text, "qwen-7b") + FRAMING


def test_a_model_server_that_cannot_count_leaves_the_estimate_standing(gateway, upstream):
    """A managed server that does not answer its count (restarting, or too old for /apply-template)
    costs nothing: the request is judged by the estimate, as for any other model."""
    chat = gateway.server.config.app.state.gateway.chat
    chat.counters["openai-model"] = ServerCounter(f"http://127.0.0.1:{closed_port()}/v1")
    try:
        text = near_the_window()
        response = ask(gateway, "openai-model", text)
    finally:
        del chat.counters["openai-model"]
    assert response.headers["x-mixpr-action"] == "passthrough"
    assert int(response.headers["x-mixpr-original-tokens"]) == count_tokens(text, "gpt-4o-mini") + FRAMING
