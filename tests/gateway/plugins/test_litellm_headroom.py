"""The gateway as a real LiteLLM proxy's compression service: ``guardrail: headroom`` (LiteLLM 1.108+).

One proxy and one gateway process, configured as docs/litellm-plugin.md tells users to (the guardrail's
``litellm_params`` are read from the page), in front of the recording upstream: what the upstream
receives is exactly what the proxy sent the model, after the gateway's ``POST /v1/compress``.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from agent_loops import chat_loop
from conftest import MASTER_KEY, closed_port
from corpus import NEEDLE, QUESTION, haystack
from fake_upstream import REPLY_TEXT, FakeUpstream
from proxy_processes import ROOT, start, stop, wait_alive

from gateway.compress import messages as shape
from mixpr.tokens import count_tokens

PROXY_KEY = "sk-proxy-headroom"
FORMS = {"min_tokens": 400, "keep_tokens": 150, "keep": 0.1, "first_sight": "always"}
DOCUMENT = haystack(600) + "\n\n" + QUESTION  # ~11k tokens
TURNS = 10


def documented_headroom_guardrail() -> dict[str, Any]:
    """The ``litellm_params`` of the ``guardrail: headroom`` configuration the docs show."""
    page = (ROOT / "docs" / "litellm-plugin.md").read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", page, re.S)
              if "guardrail: headroom" in block]
    assert blocks, "docs/litellm-plugin.md shows no guardrail: headroom configuration"
    return blocks[0]["guardrails"][0]["litellm_params"]


def _proxy_config(upstream: str, gateway_url: str) -> dict[str, Any]:
    params = {**documented_headroom_guardrail(), "api_base": gateway_url, "api_key": MASTER_KEY}
    models = [{"model_name": name, "litellm_params": {"model": f"openai/{name}", "api_base": upstream,
                                                      "api_key": "sk-upstream"}}
              for name in ("agent", "small")]
    return {"model_list": models, "guardrails": [{"guardrail_name": "mixpr", "litellm_params": params}],
            "general_settings": {"master_key": PROXY_KEY}, "litellm_settings": {"telemetry": False},
            "router_settings": {"disable_cooldowns": True}}


def _gateway_config(upstream: str) -> dict[str, Any]:
    def entry(name: str, window: int, **mixpr: Any) -> dict[str, Any]:
        return {"model_name": name, "model_info": {"max_input_tokens": window},
                "litellm_params": {"model": f"openai/{name}", "api_base": upstream},
                "mixpr": {"router": "heuristic", **mixpr}}
    # MixPR in a thread: the test is about the proxy and the plug-in, and a worker pool would cost a
    # fork server's import, seconds of CPU, beside the two processes' own.
    return {"model_list": [entry("agent", 200_000, prefix=FORMS), entry("small", 3000, budget_tokens=800)],
            "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread"}}


@pytest.fixture(scope="module")
def proxy(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    folder = tmp_path_factory.mktemp("litellm-headroom")
    gateway_port, proxy_port = closed_port(), closed_port()
    gateway_url, proxy_url = f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{proxy_port}"
    (folder / "gateway.yaml").write_text(yaml.safe_dump(_gateway_config(upstream.base_url)))
    (folder / "proxy.yaml").write_text(yaml.safe_dump(_proxy_config(upstream.base_url, gateway_url)))
    started = time.monotonic()
    gateway = start([sys.executable, "-m", "gateway", "--config", str(folder / "gateway.yaml"),
                     "--host", "127.0.0.1", "--port", str(gateway_port)], folder / "gateway.log")
    process = start([str(Path(sys.executable).parent / "litellm"), "--config", str(folder / "proxy.yaml"),
                     "--host", "127.0.0.1", "--port", str(proxy_port)], folder / "proxy.log")
    try:
        wait_alive(gateway_url, gateway, folder / "gateway.log", started, "/health/readiness")
        wait_alive(proxy_url, process, folder / "proxy.log", started)
        with openai.OpenAI(base_url=proxy_url + "/v1", api_key=PROXY_KEY, max_retries=0, timeout=120) as c:
            yield c
    finally:
        stop(process)
        stop(gateway)


def _sent(proxy: openai.OpenAI, upstream: FakeUpstream, model: str, messages: list[dict[str, Any]]
          ) -> list[dict[str, Any]]:
    """The messages the upstream received for one request through the proxy."""
    upstream.clear()
    reply = proxy.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == REPLY_TEXT
    [seen] = [r for r in upstream.received(model) if r.path.endswith("/chat/completions")]
    return seen.json["messages"]


def test_a_long_document_pasted_earlier_is_compressed(proxy: openai.OpenAI, upstream: FakeUpstream) -> None:
    """The proxy holds the system prompt, the answer and the question back; the gateway compresses the
    document it gets, and the model receives it cut, the rest as the client sent it."""
    messages = [{"role": "system", "content": "Answer from the document."},
                {"role": "user", "content": DOCUMENT},
                {"role": "assistant", "content": "I have read it."},
                {"role": "user", "content": QUESTION}]
    seen = _sent(proxy, upstream, "small", messages)
    assert [m["role"] for m in seen] == [m["role"] for m in messages]
    assert [seen[i] for i in (0, 2, 3)] == [messages[i] for i in (0, 2, 3)]
    document = seen[1]["content"]
    assert count_tokens(document, "gpt-4o-mini") < count_tokens(DOCUMENT, "gpt-4o-mini") / 4
    assert NEEDLE in document or QUESTION in document


def test_an_agent_loop_keeps_its_pairs_and_only_appends(proxy: openai.OpenAI, upstream: FakeUpstream) -> None:
    """Ten turns of tool calls and results: every request reaches the model with each call answered,
    and repeats the previous request's bytes message for message, but for the newest exchange the
    proxy held back from the gateway then (it reaches the model compressed from this turn on)."""
    previous: list[dict[str, Any]] = []
    loop = chat_loop(TURNS)
    for turn, messages in enumerate(loop):
        seen = _sent(proxy, upstream, "agent", messages)
        assert shape.pairing(seen) == [], f"turn {turn}"
        assert [m["role"] for m in seen] == [m["role"] for m in messages]
        newest = len(messages) - 2  # the newest exchange: its call and its result
        assert seen[newest:] == messages[newest:], "the newest exchange goes as sent (LiteLLM holds it back)"
        if previous:
            kept = len(previous) - 1  # all but the previous request's newest result
            assert seen[:kept] == previous[:kept], f"turn {turn} changed an earlier message"
            result = seen[kept]["content"]
            assert "omitted" in result and len(result) < len(messages[kept]["content"]) / 2
        previous = seen
    tools = [m for m in previous if m["role"] == "tool"]
    assert len(tools) == TURNS and all("omitted" in m["content"] for m in tools[:-1])
