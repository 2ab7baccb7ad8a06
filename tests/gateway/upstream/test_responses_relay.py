"""Which deployments the Responses relay serves, and where their requests go."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ModelEntry
from gateway.upstream import responses_relay


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_API_KEY", "AZURE_API_BASE", "AZURE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _entry(model: str, info: dict[str, Any] | None = None, **params: Any) -> ModelEntry:
    return ModelEntry(model_name="m", litellm_params={"model": model, **params}, model_info=info or {})


def test_openai_itself_serves_responses() -> None:
    to = responses_relay.target(_entry("openai/gpt-5", api_key="sk-up"), timeout=30)
    assert to is not None and to.url == "https://api.openai.com/v1/responses" and to.model == "gpt-5"
    assert to.headers["authorization"] == "Bearer sk-up"


@pytest.mark.parametrize("base", ["https://acme.openai.azure.com/", "https://acme.openai.azure.com/openai",
                                  "https://acme.openai.azure.com/openai/v1/"])
def test_azure_serves_its_v1_responses(base: str) -> None:
    entry = _entry("azure/my-gpt5", api_base=base, api_key="k" * 32)
    to = responses_relay.target(entry, timeout=30)
    assert to is not None and to.url == "https://acme.openai.azure.com/openai/v1/responses"
    assert to.model == "my-gpt5" and to.headers["api-key"] == "k" * 32


@pytest.mark.parametrize("entry", [
    _entry("openai/qwen", api_base="http://127.0.0.1:8080/v1"),  # llama.cpp, vLLM, ...: chat completions
    _entry("anthropic/claude", {"responses_api": True}),  # no such API, whatever the config says
    _entry("openai/gpt-5", {"responses_api": False}),  # the operator turned it off
    _entry("openai/gpt-5", temperature=0.2),  # a setting LiteLLM's translation applies
    _entry("azure/my-gpt5"),  # Azure without a resource to send to
    _entry("azure/my-gpt5", {"responses_api": True}),  # declared, still nowhere to send
    _entry("azure/my-gpt5", {"responses_api": False}, api_base="https://acme.openai.azure.com"),  # off
])
def test_everything_else_keeps_the_translation(entry: ModelEntry) -> None:
    assert responses_relay.target(entry, timeout=30) is None


@pytest.mark.parametrize("timeout", ["soon", 0, -1, True])
def test_an_odd_timeout_falls_back_to_the_gateways(timeout: Any) -> None:
    to = responses_relay.target(_entry("openai/gpt-5", api_key="sk-up", timeout=timeout), timeout=30)
    assert to is not None and to.timeout.sock_read == 30


def test_a_declared_openai_style_server_is_relayed() -> None:
    entry = _entry("openai/gpt-oss", {"responses_api": True}, api_base="http://vllm:8000/v1/", timeout=7)
    to = responses_relay.target(entry, timeout=30)
    assert to is not None and to.url == "http://vllm:8000/v1/responses" and to.timeout.sock_read == 7


@pytest.mark.parametrize("event, kind", [
    (b'event: response.completed\ndata: {"type":"response.completed"}\n\n', "response.completed"),
    (b'data: {"type":"error","message":"x"}\n\n', "error"),  # no event line: the data's type
    (b'event: response.output_text.delta\ndata: {"delta":"response.completed"}\n\n',
     "response.output_text.delta"),  # a delta that mentions an end is no end
    (b"data: [DONE]\n\n", ""),
])
def test_event_type(event: bytes, kind: str) -> None:
    assert responses_relay.event_type(event) == kind
