"""Upstream error text reaches clients without the operator's data: every key, base URL host,
user-info, upstream model name and managed model file the config holds is replaced by exact value
(an upstream model name by the client's own alias for it), and credential-shaped text the config
does not hold is caught by the patterns. Through real HTTP, against the tests' fake upstream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, UPSTREAM_KEY, ServerThread
from fake_upstream import LEAK_BASE, LEAK_KEY, LEAK_PATH, FakeUpstream

from gateway import create_app
from gateway.config import parse_config
from gateway.upstream import redaction

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
PRIVATE = "ft:gpt-4o:acme:internal-v3"
HELLO = [{"role": "user", "content": "hello"}]


def _config(base: str) -> dict[str, Any]:
    def entry(name: str, model: str, api_base: str, api_key: str = UPSTREAM_KEY) -> dict[str, Any]:
        return {"model_name": name, "litellm_params": {"model": f"openai/{model}", "api_base": api_base,
                                                       "api_key": api_key}}

    return {"model_list": [entry("private", PRIVATE, base), entry("leaky", "mode-leak-500", base, LEAK_KEY),
                           entry("elsewhere", "served-elsewhere", LEAK_BASE)],
            # These answers are errors, nothing is compressed: MixPR in a thread, so no fork server
            # imports it and LiteLLM (seconds of CPU).
            "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread"}}


@pytest.fixture(scope="module")
def url(upstream: FakeUpstream) -> Iterator[str]:
    server = ServerThread(create_app(parse_config(_config(upstream.base_url)))).start()
    yield server.url
    server.stop()


PATHS = {
    "chat": ("/v1/chat/completions", {"messages": HELLO}),
    "chat stream": ("/v1/chat/completions", {"messages": HELLO, "stream": True}),
    "responses": ("/v1/responses", {"input": "hello"}),
    "messages": ("/v1/messages", {"messages": HELLO, "max_tokens": 16}),
}


def _answer(url: str, kind: str, model: str) -> httpx.Response:
    path, body = PATHS[kind]
    return httpx.post(url + path, json={"model": model, **body}, headers=AUTH, timeout=60)


@pytest.mark.parametrize("kind", sorted(PATHS))
def test_a_404_names_the_clients_alias_not_the_upstream_model(url: str, kind: str) -> None:
    response = _answer(url, kind, "private")
    assert response.status_code == 404, response.text
    assert "acme" not in response.text and "internal-v3" not in response.text
    assert "`private`" in response.text  # what the client asked for: the message still says which


@pytest.mark.parametrize("kind", sorted(PATHS))
def test_a_plain_text_500_loses_hosts_keys_and_paths(url: str, kind: str) -> None:
    response = _answer(url, kind, "leaky")
    assert response.status_code >= 500, response.text
    for secret in ("10.2.3.4", LEAK_KEY, LEAK_KEY[4:20], LEAK_PATH, "acme-internal", "hunter2", "ops:",
                   "hf_x"):
        assert secret not in response.text, (secret, response.text)
    assert "could not load" in response.text  # the rest of what the upstream said stays


@pytest.mark.parametrize("text", [
    "key xai-" + "a1B2" * 12, "token hf_" + "Ab" * 17, "key gsk_" + "Zq" * 26,
    "Authorization: Basic dXNlcjpzM2NyZXQ=", "https://admin:s3cret@db.internal:5432/x",
    "api key 0123456789abcdef0123456789abcdef", "could not load /opt/weights/secret-model.Q8_0.gguf",
])
def test_the_patterns_catch_what_the_config_does_not_hold(text: str) -> None:
    redacted = redaction.redact(text)
    assert "[redacted]" in redacted or "[model-file]" in redacted
    assert text.split()[-1] not in redacted


def test_every_secret_of_the_config_is_known(tmp_path: Any) -> None:
    managed = {"kind": "xllamacpp", "model_path": LEAK_PATH, "port": 8099}
    raw = _config("https://llm.acme.example/v1")  # user-info in an api_base is refused (issue 57)
    raw["general_settings"].update(form_cache_url="redis://user:pa55word@llm.acme.example:6379/0",
                                   deployment_secret="d" * 32)
    raw["model_list"].append({"model_name": "local", "litellm_params": {"model": "openai/local"},
                              "managed_server": managed})
    known = redaction.Redactor.from_config(parse_config(raw))
    text = (f"https://user:pa55word@llm.acme.example/v1 {LEAK_BASE} {UPSTREAM_KEY} {LEAK_PATH} "
            f"model {PRIVATE} and mode-leak-500")
    out = known(text)
    for secret in ("pa55word", "user:", "llm.acme.example", "10.2.3.4", UPSTREAM_KEY, LEAK_PATH, PRIVATE,
                   "mode-leak-500"):
        assert secret not in out, (secret, out)
    assert "model private and leaky" in out


# Issue 47: the net's holes. Each is text an upstream (or a server behind it) may put in an error.
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize("text, secret", [
    ("InvalidClientTokenId: AKIAIOSFODNN7EXAMPLE is not valid", "AKIAIOSFODNN7EXAMPLE"),
    ("session ASIAY34FZKBOKMUTVV7A expired", "ASIAY34FZKBOKMUTVV7A"),
    (f"aws_secret_access_key={AWS_SECRET} rejected", AWS_SECRET),
    (f'"SecretAccessKey": "{AWS_SECRET}"', AWS_SECRET),
    ("cannot reach redis://:s3cretpass@cache.internal:6379/0", "s3cretpass"),
    ("fetch https://ghp_" + "a1" * 18 + "@github.com/acme/weights failed", "ghp_" + "a1" * 18),
    ("fetch https://x0tok3nx0tok3nx0@git.example/acme failed", "x0tok3nx0tok3nx0"),
    ("sent Authorization: Token 9f8e7d6c5b4a39281706 to the server", "9f8e7d6c5b4a39281706"),
    ("header authorization: Digest-Key abcdef123456", "abcdef123456"),
    ("worker http://10.20.30.40:8000/v1 down", "10.20.30.40"),  # a private address, configured or not
    ("connect to 192.168.1.7 refused", "192.168.1.7"),
    ("172.31.0.2:6379 timed out", "172.31.0.2"),
])
def test_the_patterns_catch_aws_keys_user_info_and_every_auth_scheme(text: str, secret: str) -> None:
    redacted = redaction.Redactor()(text)
    assert secret not in redacted and ("[redacted]" in redacted or "[upstream-host]" in redacted), redacted


@pytest.mark.parametrize("text", [
    "request id 0123456789abcdef0123456789abcdef failed",  # unlabelled hex: an id as often as a key
    "Token validation failed for the request",
    "the akiaiosfodnn7example word",  # lower case: no AWS key id
    "see https://github.com/acme/weights",
    "version 1.10.2.3 of 8.8.8.8 and 172.32.0.1",  # public addresses and versions are no secret
])
def test_the_false_positive_rule_holds(text: str) -> None:
    assert redaction.Redactor()(text) == text


def test_values_match_in_any_case_as_the_config_spells_them() -> None:
    """urlsplit lowercases a host: the spelling in the config (and an upstream's lowercased model
    name) must go too."""
    raw = _config("https://LLM.Acme.Example:8443/v1")
    raw["model_list"][0]["litellm_params"]["model"] = "openai/Acme-Internal-V3"
    known = redaction.Redactor.from_config(parse_config(raw), environ={})
    out = known("LLM.Acme.Example:8443 and llm.acme.example refused acme-internal-v3 (ACME-INTERNAL-V3)")
    for secret in ("acme.example", "Acme.Example", "internal-v3", "INTERNAL-V3"):
        assert secret.lower() not in out.lower(), out
    assert "refused private (private)" in out


def test_keys_and_hosts_read_from_the_environment_are_known() -> None:
    """The relays (chat, compaction) and LiteLLM take a key and base URL from the environment when the
    config names none; an Azure key is 32 hex, unlabelled in an upstream's text."""
    environ = {"OPENAI_API_KEY": "sk-from-the-env-0001", "OPENAI_BASE_URL": "https://Relay.Corp.Example/v1",
               "AZURE_API_KEY": "0123456789abcdef0123456789abcdef", "HOME": "/home/ops"}
    known = redaction.Redactor.from_config(parse_config(_config("http://127.0.0.1:9/v1")), environ=environ)
    out = known("key sk-from-the-env-0001 at relay.corp.example; "
                "0123456789ABCDEF0123456789ABCDEF bad; /home/ops")
    assert "env-0001" not in out and "corp.example" not in out and "0123456789" not in out, out
    assert "/home/ops" in out  # not a key or a base URL


def test_a_model_named_by_a_plain_word_is_matched_as_spelled() -> None:
    """Matching in any case must not take "Slow down." from every message for a model named ``slow``."""
    known = redaction.Redactor({"slow": "chat-slow", "Qwen3-8B": "local"})
    assert known("Slow down: slow is busy; qwen3-8b too") == "Slow down: chat-slow is busy; local too"
