"""MixPR inside a real LiteLLM proxy process, in front of the recording upstream.

One proxy (started once for the module: it takes tens of seconds) carries the gateway's guardrail
twice over: ``mixpr``, the in-process class (``gateway.plugins.litellm_guardrail.MixPRGuardrail``), and
``mixpr-api``, LiteLLM's own ``generic_guardrail_api`` calling a running gateway process, with the
fail-open settings of the documented configuration (read from docs/litellm-plugin.md itself). Each
request names its guardrail in LiteLLM's ``guardrails`` body field. The upstreams record what they
receive, so a test sees exactly what the proxy sent the model: ``fake_upstream`` (OpenAI) and
``scripted_upstream`` (an Anthropic model, and a model that is rate-limited twice before it answers).
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
from conftest import MASTER_KEY, closed_port
from corpus import NEEDLE, QUESTION, haystack
from fake_upstream import FakeUpstream
from proxy_processes import start, stop, wait_alive
from scripted_upstream import ScriptedUpstream

from mixpr.tokens import count_tokens

ROOT = Path(__file__).resolve().parents[3]
PROXY_KEY = "sk-proxy-test"
WINDOW = 3000
GUARDRAIL = "gateway.plugins.litellm_guardrail.MixPRGuardrail"
OLD_GUARDRAIL = "gateway.litellm_guardrail.MixPRGuardrail"  # deprecated, kept for one release
PROXY_LOGS: dict[str, Path] = {}  # proxy url -> its output
BUDGET = 800
LONG_PROMPT = haystack(600) + "\n\n" + QUESTION  # ~11k tokens, far over the 3,000-token window
GUARDRAILS = ("mixpr", "mixpr-api")  # the class in the proxy; the generic API calling the gateway
CLAUDE = "anthropic/claude-3-5-haiku-20241022"
FAIL_OPEN_KEYS = ("unreachable_fallback", "fail_on_error")


def documented_generic_guardrail() -> dict[str, Any]:
    """The ``litellm_params`` of the generic-guardrail configuration the docs tell users to copy."""
    page = (ROOT / "docs" / "litellm-plugin.md").read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", page, re.S)
              if "generic_guardrail_api" in block]
    assert blocks, "docs/litellm-plugin.md shows no generic_guardrail_api configuration"
    return blocks[0]["guardrails"][0]["litellm_params"]


def _model(name: str, upstream: str, base: str) -> dict[str, Any]:
    # use_chat_completions_api: LiteLLM bridges /v1/responses to the upstream's chat completions.
    params = {"model": f"openai/{upstream}", "api_base": base, "api_key": "sk-upstream",
              "use_chat_completions_api": True}
    return {"model_name": name, "litellm_params": params, "model_info": {"max_input_tokens": WINDOW}}


def proxy_config(upstream_base: str, gateway_url: str, scripted_base: str) -> dict[str, Any]:
    mixpr = {"router": "heuristic", "budget_tokens": BUDGET, "compression_workers": 1}
    fail_open = {k: v for k, v in documented_generic_guardrail().items() if k in FAIL_OPEN_KEYS}
    claude = {"model_name": "claude-small", "model_info": {"max_input_tokens": WINDOW},
              "litellm_params": {"model": CLAUDE, "api_base": scripted_base, "api_key": "sk-upstream"}}
    flaky = {"model_name": "flaky", "model_info": {"max_input_tokens": WINDOW},
             "litellm_params": {"model": "openai/flaky-retried", "api_base": scripted_base + "/v1",
                                "api_key": "sk-upstream", "num_retries": 2}}
    # No num_retries: the openai SDK's own retries (LiteLLM's DEFAULT_MAX_RETRIES) are all it has.
    embedder = {"model_name": "flaky-embed", "model_info": {"mode": "embedding"},
                "litellm_params": {"model": "openai/flaky-embedding", "api_base": scripted_base + "/v1",
                                   "api_key": "sk-upstream"}}
    return {
        "model_list": [_model("small", "mode-needle-small", upstream_base),
                       _model("broken", "mode-needle-broken", upstream_base), claude, flaky, embedder],
        "guardrails": [
            {"guardrail_name": "mixpr", "litellm_params": {
                "guardrail": GUARDRAIL, "mode": "pre_call", **mixpr}},
            # The previous release's path (gateway.litellm_guardrail): still loads, with a warning.
            {"guardrail_name": "mixpr-old", "litellm_params": {
                "guardrail": OLD_GUARDRAIL, "mode": "pre_call", **mixpr}},
            # MixPR raises for an unknown method: the compressor failing, deterministically.
            {"guardrail_name": "mixpr-broken", "litellm_params": {
                "guardrail": GUARDRAIL, "mode": "pre_call", **mixpr,
                "method": "no-such-method", "compression_executor": "thread"}},
            {"guardrail_name": "mixpr-api", "litellm_params": {
                "guardrail": "generic_guardrail_api", "mode": "pre_call", "api_base": gateway_url,
                "api_key": MASTER_KEY, **fail_open}},
            # The same, with the gateway stopped: nothing listens on its port.
            {"guardrail_name": "mixpr-api-down", "litellm_params": {
                "guardrail": "generic_guardrail_api", "mode": "pre_call",
                "api_base": f"http://127.0.0.1:{closed_port()}", "api_key": MASTER_KEY, **fail_open}},
        ],
        "general_settings": {"master_key": PROXY_KEY},
        "litellm_settings": {"telemetry": False},
        "router_settings": {"disable_cooldowns": True},  # a failing test must not cool the model down
    }


def gateway_config(upstream_base: str) -> dict[str, Any]:
    """The gateway the generic API calls: the proxy's model names, with their windows and budgets."""
    def entry(name: str, **mixpr: Any) -> dict[str, Any]:
        return {"model_name": name, "litellm_params": {"model": f"openai/{name}", "api_base": upstream_base},
                "model_info": {"max_input_tokens": WINDOW},
                "mixpr": {"budget_tokens": BUDGET, "router": "heuristic", **mixpr}}
    # MixPR in a thread: the test is about the proxy and the plug-in, and a worker pool would cost a
    # fork server's import, seconds of CPU, beside the two processes' own.
    return {"model_list": [entry("small"), entry("broken", method="no-such-method"), entry("claude-small")],
            "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread"}}


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy_url(upstream: FakeUpstream, scripted: ScriptedUpstream,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("litellm-proxy")
    gateway_port, proxy_port = closed_port(), closed_port()
    gateway_url, proxy_url = f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{proxy_port}"
    (folder / "gateway.yaml").write_text(yaml.safe_dump(gateway_config(upstream.base_url)))
    config = proxy_config(upstream.base_url, gateway_url, scripted.base_url)
    (folder / "proxy.yaml").write_text(yaml.safe_dump(config))
    # Both start at once: the proxy only calls the gateway when a request arrives.
    started = time.monotonic()
    gateway = start([sys.executable, "-m", "gateway", "--config", str(folder / "gateway.yaml"),
                      "--host", "127.0.0.1", "--port", str(gateway_port)], folder / "gateway.log")
    proxy = start([str(Path(sys.executable).parent / "litellm"), "--config", str(folder / "proxy.yaml"),
                    "--host", "127.0.0.1", "--port", str(proxy_port)], folder / "proxy.log")
    try:
        ready = wait_alive(gateway_url, gateway, folder / "gateway.log", started, "/health/readiness")
        seconds = wait_alive(proxy_url, proxy, folder / "proxy.log", started)
        # Shown with -s: the slowest step of the suite.
        print(f"\ngateway answered after {ready:.1f} s, LiteLLM proxy after {seconds:.1f} s")
        PROXY_LOGS[proxy_url] = folder / "proxy.log"
        yield proxy_url
    finally:
        stop(proxy)
        stop(gateway)


@pytest.fixture
def proxy(proxy_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy_url + "/v1", api_key=PROXY_KEY, max_retries=0, timeout=120) as c:
        yield c


def _sent(upstream: FakeUpstream, model: str) -> list[dict[str, Any]]:
    """The messages of the one chat request ``model`` received since the test began."""
    calls = [r for r in upstream.received(model) if r.path.endswith("/chat/completions")]
    assert len(calls) == 1, [r.path for r in upstream.received(model)]
    return calls[0].json["messages"]


def _text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content")) for m in messages)


def _assert_compressed(sent: list[dict[str, Any]]) -> None:
    original = count_tokens(LONG_PROMPT, "gpt-4o-mini")
    tokens = count_tokens(_text(sent), "gpt-4o-mini")
    assert tokens <= BUDGET + 50 < original, (tokens, original)
    assert NEEDLE in _text(sent) and QUESTION in _text(sent)


def _assert_reported(headers: Any, guardrail: str) -> None:
    assert guardrail in headers.get("x-litellm-applied-guardrails", "")
    if guardrail == "mixpr":  # the generic API has no way to add response headers
        assert headers["x-mixpr-action"] == "compressed"
        assert int(headers["x-mixpr-original-tokens"]) > WINDOW
        assert int(headers["x-mixpr-compressed-tokens"]) <= WINDOW


@pytest.mark.parametrize("guardrail", GUARDRAILS)
def test_chat_long_prompt_reaches_the_model_compressed(proxy: openai.OpenAI, upstream: FakeUpstream,
                                                       guardrail: str) -> None:
    upstream.clear()
    raw = proxy.chat.completions.with_raw_response.create(
        model="small", messages=[{"role": "system", "content": "Answer briefly."},
                                 {"role": "user", "content": LONG_PROMPT}],
        max_tokens=50, extra_body={"guardrails": [guardrail]})
    sent = _sent(upstream, "mode-needle-small")
    _assert_compressed(sent)
    assert sent[0] == {"role": "system", "content": "Answer briefly."}
    _assert_reported(raw.headers, guardrail)


@pytest.mark.parametrize("guardrail", GUARDRAILS)
def test_responses_long_input_reaches_the_model_compressed(proxy: openai.OpenAI, upstream: FakeUpstream,
                                                           guardrail: str) -> None:
    upstream.clear()
    raw = proxy.responses.with_raw_response.create(model="small", input=LONG_PROMPT, max_output_tokens=50,
                                                   extra_body={"guardrails": [guardrail]})
    _assert_compressed(_sent(upstream, "mode-needle-small"))
    _assert_reported(raw.headers, guardrail)


@pytest.mark.parametrize("guardrail", GUARDRAILS)
def test_anthropic_messages_long_prompt_reaches_the_model_compressed(
        proxy_url: str, upstream: FakeUpstream, guardrail: str) -> None:
    import anthropic
    upstream.clear()
    with anthropic.Anthropic(base_url=proxy_url, api_key=PROXY_KEY, max_retries=0, timeout=120) as client:
        raw = client.messages.with_raw_response.create(
            model="small", max_tokens=50, messages=[{"role": "user", "content": LONG_PROMPT}],
            extra_body={"guardrails": [guardrail]})
    _assert_compressed(_sent(upstream, "mode-needle-small"))
    _assert_reported(raw.headers, guardrail)


@pytest.mark.parametrize("guardrail", GUARDRAILS)
def test_short_prompt_reaches_the_model_byte_for_byte(proxy: openai.OpenAI, upstream: FakeUpstream,
                                                      guardrail: str) -> None:
    upstream.clear()
    messages = [{"role": "system", "content": "Be terse."},
                {"role": "user", "content": [{"type": "text", "text": "Hello  there,\n\tfriend. ✓"}]}]
    raw = proxy.chat.completions.with_raw_response.create(model="small", messages=messages,
                                                          extra_body={"guardrails": [guardrail]})
    assert _sent(upstream, "mode-needle-small") == messages
    if guardrail == "mixpr":
        assert raw.headers["x-mixpr-action"] == "passthrough"


def test_the_previous_releases_plugin_path_still_loads_with_a_warning(
        proxy: openai.OpenAI, proxy_url: str, upstream: FakeUpstream) -> None:
    upstream.clear()
    raw = proxy.chat.completions.with_raw_response.create(
        model="small", messages=[{"role": "user", "content": LONG_PROMPT}], max_tokens=50,
        extra_body={"guardrails": ["mixpr-old"]})
    _assert_compressed(_sent(upstream, "mode-needle-small"))
    assert raw.headers["x-mixpr-action"] == "compressed"
    log = PROXY_LOGS[proxy_url].read_text()
    assert f"guardrail: {OLD_GUARDRAIL} is deprecated" in log and GUARDRAIL in log


@pytest.mark.parametrize("guardrail", ["mixpr-broken", "mixpr-api"])
def test_failing_compressor_fails_open(proxy: openai.OpenAI, upstream: FakeUpstream, guardrail: str) -> None:
    """MixPR raising (an unknown method) costs no answer: the model gets the prompt as it was."""
    upstream.clear()
    raw = proxy.chat.completions.with_raw_response.create(
        model="broken", messages=[{"role": "user", "content": LONG_PROMPT}], max_tokens=20,
        extra_body={"guardrails": [guardrail], "needle": "amber-falcon-427"})
    assert raw.parse().choices[0].message.content == "amber-falcon-427"
    assert _sent(upstream, "mode-needle-broken") == [{"role": "user", "content": LONG_PROMPT}]
    if guardrail == "mixpr-broken":
        assert raw.headers["x-mixpr-action"] == "passthrough"
        assert raw.headers["x-mixpr-error"] == "compression_failed"


@pytest.mark.parametrize(("guardrail", "sent_limit"), [("mixpr", 1024), ("mixpr-api", 2900)])
def test_a_reply_that_leaves_no_room_is_lowered_in_the_request_the_proxy_sends(
        proxy: openai.OpenAI, upstream: FakeUpstream, guardrail: str, sent_limit: int) -> None:
    """2,900 of the 3,000-token window for the reply: the class lowers it to the least reply (a
    quarter of 3,000 is below completion_reserve_tokens' 1,024) in what the proxy sends the model;
    the generic API cannot (LiteLLM takes only texts back), so the model gets the client's value."""
    upstream.clear()
    raw = proxy.chat.completions.with_raw_response.create(
        model="small", messages=[{"role": "user", "content": LONG_PROMPT}], max_tokens=2900,
        extra_body={"guardrails": [guardrail]})
    [call] = [r for r in upstream.received("mode-needle-small") if r.path.endswith("/chat/completions")]
    assert call.json["max_tokens"] == sent_limit
    _assert_compressed(call.json["messages"])
    if guardrail == "mixpr":
        assert raw.headers["x-mixpr-max-tokens"] == "2900->1024"


def test_mixpr_switches_travel_as_headers(proxy: openai.OpenAI, upstream: FakeUpstream) -> None:
    """``x-mixpr-enabled: false`` reaches the guardrail through the proxy: nothing is compressed."""
    upstream.clear()
    raw = proxy.chat.completions.with_raw_response.create(
        model="small", messages=[{"role": "user", "content": LONG_PROMPT}], max_tokens=20,
        extra_body={"guardrails": ["mixpr"]}, extra_headers={"x-mixpr-enabled": "false"})
    assert _sent(upstream, "mode-needle-small") == [{"role": "user", "content": LONG_PROMPT}]
    assert raw.headers["x-mixpr-action"] == "passthrough"


@pytest.mark.parametrize("guardrail", GUARDRAILS)
def test_conversation_turn_starts_with_the_previous_turns_bytes(proxy: openai.OpenAI, upstream: FakeUpstream,
                                                                guardrail: str) -> None:
    """The gateway's conversation prefix works inside the proxy too: once a conversation has been
    compressed afresh (turn 2 makes room to grow), turn 3 reaches the model as turn 2's exact
    messages followed by the new ones, so the provider's prompt cache can hit."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": LONG_PROMPT}]
    sent = []
    for follow_up in ("What colour was the falcon?", "Which number was written next to it?", None):
        upstream.clear()
        reply = proxy.chat.completions.create(model="small", messages=messages, max_tokens=20,
                                              extra_body={"guardrails": [guardrail]})
        sent.append(_sent(upstream, "mode-needle-small"))
        if follow_up:
            messages += [{"role": "assistant", "content": reply.choices[0].message.content or "…"},
                         {"role": "user", "content": follow_up}]
    assert sent[2][: len(sent[1])] == sent[1]
    assert len(sent[2]) == len(sent[1]) + 2


# -- Anthropic blocks: every one reaches an Anthropic model as sent ---------------------------------

DOCUMENT = {"type": "document", "title": "Archive policy", "citations": {"enabled": True},
            "source": {"type": "text", "media_type": "text/plain",
                       "data": "Archive requests are served from the east vault on weekdays."}}
SEARCH_RESULT = {"type": "search_result", "source": "https://example.com/vaults", "title": "Vaults",
                 "content": [{"type": "text", "text": "The east vault holds the maritime records."}]}
THINKING = {"type": "thinking", "thinking": "The archive tool should know the number.",
            "signature": "c2lnbmF0dXJl"}
TOOL_USE = {"type": "tool_use", "id": "toolu_archive_1", "name": "archive_lookup",
            "input": {"query": "falcon"}}
FAILED = {"type": "tool_result", "tool_use_id": "toolu_archive_1", "is_error": True,
          "content": "ERROR E503: archive unavailable"}
TOOLS = [{"name": "archive_lookup", "description": "Look a record up in the archive.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}]


def anthropic_conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [DOCUMENT, SEARCH_RESULT,
                                     {"type": "text", "text": "Find the falcon's number in the archive."}]},
        {"role": "assistant",
         "content": [THINKING, {"type": "text", "text": "I will look it up."}, TOOL_USE]},
        {"role": "user", "content": [FAILED, {"type": "text", "text": LONG_PROMPT}]},
    ]


@pytest.mark.parametrize("guardrail", GUARDRAILS)
def test_anthropic_blocks_reach_an_anthropic_model_whole_and_the_long_text_compressed(
        proxy_url: str, scripted: ScriptedUpstream, guardrail: str) -> None:
    """document, search_result, thinking (with its signature), tool_use and a failed tool's short
    result (with ``is_error``) reach the model exactly as sent; only the long text is cut."""
    import anthropic
    scripted.clear()
    with anthropic.Anthropic(base_url=proxy_url, api_key=PROXY_KEY, max_retries=0, timeout=120) as client:
        reply = client.messages.create(model="claude-small", max_tokens=50, system="Answer briefly.",
                                       messages=anthropic_conversation(), tools=TOOLS,
                                       extra_body={"guardrails": [guardrail]})
    assert reply.content[0].text == "Scripted reply."
    [sent] = scripted.received(CLAUDE.split("/", 1)[1])
    first, second, third = sent["messages"]
    assert first["content"][:2] == [DOCUMENT, SEARCH_RESULT]
    assert second["content"][0] == THINKING and second["content"][2] == TOOL_USE
    assert third["content"][0] == FAILED
    assert [t["name"] for t in sent["tools"]] == ["archive_lookup"]
    long_text = third["content"][1]["text"]
    assert QUESTION in long_text
    assert count_tokens(long_text, "gpt-4o-mini") <= BUDGET + 50 < count_tokens(LONG_PROMPT, "gpt-4o-mini")


# -- failing open ------------------------------------------------------------------------------------

@pytest.mark.parametrize("prompt", ["Hello there.", LONG_PROMPT], ids=["short", "long"])
def test_generic_guardrail_with_the_gateway_stopped_still_answers(
        proxy: openai.OpenAI, upstream: FakeUpstream, prompt: str) -> None:
    """The documented generic-guardrail configuration fails open: with nothing listening, the prompt
    goes on whole."""
    upstream.clear()
    reply = proxy.chat.completions.create(
        model="small", messages=[{"role": "user", "content": prompt}], max_tokens=20,
        extra_body={"guardrails": ["mixpr-api-down"], "needle": "amber-falcon-427"})
    assert reply.choices[0].message.content
    assert _sent(upstream, "mode-needle-small") == [{"role": "user", "content": prompt}]


def test_the_hosts_retries_still_work_with_the_plugin_loaded(
        proxy: openai.OpenAI, scripted: ScriptedUpstream) -> None:
    """``num_retries: 2`` on the model: two 429s, then the answer (the plug-in leaves LiteLLM's
    retries alone)."""
    scripted.clear()
    reply = proxy.chat.completions.create(model="flaky", messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=20, extra_body={"guardrails": ["mixpr"]})
    assert reply.choices[0].message.content == "Scripted reply."
    assert scripted.attempts["flaky-retried"] == 3


def test_the_hosts_embedding_calls_keep_the_sdks_retries(
        proxy: openai.OpenAI, scripted: ScriptedUpstream) -> None:
    """Loading the plug-in left LiteLLM's ``DEFAULT_MAX_RETRIES`` alone: an embedding model without
    ``num_retries`` still gets the openai SDK's two retries through two 429s."""
    scripted.clear()
    result = proxy.embeddings.create(model="flaky-embed", input="hello")
    assert result.data[0].embedding == [0.1, 0.2, 0.3]
    assert scripted.attempts["flaky-embedding"] == 3


def test_a_streamed_long_chat_is_compressed_and_streams_back(
        proxy: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    with proxy.chat.completions.with_streaming_response.create(
            model="small", messages=[{"role": "user", "content": LONG_PROMPT}], max_tokens=50, stream=True,
            extra_body={"guardrails": ["mixpr"], "needle": "amber-falcon-427"}) as raw:
        assert raw.headers["x-mixpr-action"] == "compressed"
        chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 2 and text == "amber-falcon-427"
    _assert_compressed(_sent(upstream, "mode-needle-small"))
