"""One exit for every upstream answer (issue 47): every route, streamed and not, through the raw
relays and through LiteLLM, against the same leaky upstreams (a plain-text 500, a JSON 500, an error
event after the first chunk; OpenAI-compatible and Anthropic), and not one byte of the operator's
(keys from the config and the environment, hosts, upstream model names, file paths, user:password
URLs) reaches the client, in its body or its headers, in any case."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, UPSTREAM_KEY, ServerThread
from fake_anthropic import FakeAnthropic
from fake_upstream import LEAK_BASE, LEAK_KEY, LEAK_PATH, FakeUpstream

from gateway import create_app
from gateway.config import parse_config

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
ENV_KEY = "sk-from-the-environment-7731"
ANTHROPIC_KEY = "sk-ant-operator-0042-secret"
HELLO = [{"role": "user", "content": "hello"}]
# alias -> upstream model: no alias holds a byte of an upstream name
OPENAI = {"drip": "mode-leak-500", "spill": "mode-leak-json", "trickle": "mode-leak-midstream",
          "seep": "mode-leak-textstream", "from-env": "mode-leak-json"}
ANTHROPIC = {"claude-a": "leak-text", "claude-b": "leak-json", "claude-c": "leak-midstream",
             "claude-d": "leak-textstream"}
ROUTES = {
    "chat": ("/v1/chat/completions", {"messages": HELLO}),
    "chat stream": ("/v1/chat/completions", {"messages": HELLO, "stream": True}),
    "responses": ("/v1/responses", {"input": "hello"}),
    "responses stream": ("/v1/responses", {"input": "hello", "stream": True}),
    "messages": ("/v1/messages", {"messages": HELLO, "max_tokens": 16}),
    "messages stream": ("/v1/messages", {"messages": HELLO, "max_tokens": 16, "stream": True}),
    "compact": ("/v1/responses/compact", {"input": HELLO}),
    "embeddings": ("/v1/embeddings", {"input": "hello"}),
    "completions": ("/v1/completions", {"prompt": "hello"}),
    "completions stream": ("/v1/completions", {"prompt": "hello", "stream": True}),
    "compress": ("/v1/compress", {"messages": HELLO}),
}


@pytest.fixture(scope="module")
def anthropic_upstream() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


def _config(base: str, anthropic_base: str, *, raw_relay: bool) -> dict[str, Any]:
    def openai(name: str, model: str) -> dict[str, Any]:
        params = {"model": f"openai/{model}"}
        if name != "from-env":  # that one's key and base URL come from the environment
            params.update(api_base=base, api_key=LEAK_KEY if name == "drip" else UPSTREAM_KEY)
        return {"model_name": name, "litellm_params": params}

    def anthropic(name: str, model: str) -> dict[str, Any]:
        return {"model_name": name, "litellm_params": {"model": f"anthropic/{model}",
                                                       "api_base": anthropic_base, "api_key": ANTHROPIC_KEY}}

    models = [openai(n, m) for n, m in OPENAI.items()] + [anthropic(n, m) for n, m in ANTHROPIC.items()]
    models.append({"model_name": "elsewhere", "litellm_params": {"model": "openai/x", "api_base": LEAK_BASE}})
    # Nothing here is long enough to compress: MixPR in a thread, so no fork server imports it and LiteLLM.
    return {"model_list": models, "general_settings": {"master_key": MASTER_KEY, "raw_relay": raw_relay,
                                                       "compression_executor": "thread"}}


@pytest.fixture(scope="module", params=[True, False], ids=["relay", "litellm"])
def url(request: pytest.FixtureRequest, upstream: FakeUpstream,
        anthropic_upstream: FakeAnthropic) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_KEY", ENV_KEY)
        env.setenv("OPENAI_BASE_URL", upstream.base_url)
        config = _config(upstream.base_url, anthropic_upstream.url, raw_relay=request.param)
        server = ServerThread(create_app(parse_config(config))).start()
        yield server.url
        server.stop()


def _operators(upstream: FakeUpstream, anthropic_upstream: FakeAnthropic) -> list[str]:
    hosts = [upstream.base_url.split("//")[1].split("/")[0], anthropic_upstream.url.split("//")[1]]
    return [LEAK_KEY, LEAK_KEY[4:20], UPSTREAM_KEY, ENV_KEY, ANTHROPIC_KEY, "10.2.3.4", LEAK_PATH,
            "acme-internal", "hunter2", "ops:", "hf_xxxx", *hosts, *OPENAI.values(), *ANTHROPIC.values()]


# LiteLLM's Anthropic stream reader drops an ``event: error`` whose data is not JSON and ends the
# chunks with a stop: nothing of it reaches the client (nothing leaks), and no error either.
SWALLOWED = {("chat stream", "claude-d")}
CASES = [(route, model) for route in ROUTES for model in OPENAI] + \
        [(route, model) for route in ROUTES if route.startswith(("messages", "chat", "compact"))
         for model in ANTHROPIC]


@pytest.mark.parametrize("route, model", CASES)
def test_nothing_of_the_operators_reaches_the_client(url: str, upstream: FakeUpstream,
                                                     anthropic_upstream: FakeAnthropic, route: str,
                                                     model: str) -> None:
    path, body = ROUTES[route]
    response = httpx.post(url + path, json={"model": model, **body}, headers=AUTH, timeout=60)
    seen = (response.text + " " + " ".join(f"{k}: {v}" for k, v in response.headers.items())).lower()
    for secret in _operators(upstream, anthropic_upstream):
        assert secret.lower() not in seen, (secret, response.status_code, response.text)
    if route != "compress" and (route, model) not in SWALLOWED:  # compress sends nothing upstream
        assert '"error"' in seen, response.text  # the upstream's failure was reported, in the API's shape


def _forms_computed(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("mixpr_message_forms_total"))


def test_no_other_key_can_probe_what_was_sent_before(url: str, upstream: FakeUpstream) -> None:
    """Issue 47's suspicion, settled: ``x-mixpr-new-forms`` and ``x-mixpr-prefix-*`` say whether a
    text's forms were computed (or a prefix sent) before, by any caller. The gateway knows one client
    credential, ``master_key``: whoever holds it is one principal (as for the provider's own prompt
    cache, shared by the operator's key). Any other key, on every route, is refused before any work,
    without an ``x-mixpr-*`` header and without a form computed or a byte sent upstream, so no one
    outside that principal can ask."""
    upstream.clear()
    before = _forms_computed(url)
    for path, body in ROUTES.values():
        for headers in ({}, {"Authorization": "Bearer sk-someone-else"}, {"x-api-key": "sk-someone-else"}):
            response = httpx.post(url + path, json={"model": "drip", **body}, headers=headers, timeout=60)
            assert response.status_code == 401, (path, response.text)
            assert not [k for k in response.headers if k.lower().startswith("x-mixpr")], path
    assert _forms_computed(url) == before and upstream.received() == []
