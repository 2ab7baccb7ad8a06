"""Observe mode (``mixpr_settings.mode: observe``, ``gateway.core.shadow``):

- the upstream receives byte for byte what it receives with compression off for the request
  (chat, streamed or not, Responses, Anthropic Messages to an OpenAI model), however long the prompt and
  whatever max_tokens; no prompt_cache_key of the gateway's;
- a short single question says up front what compressing would send (the same) and saves (0);
  a long one is sampled, computed after the response, and counted: tokens, cached tokens, costs;
- the would-have turns leave the sent-request metrics (mixpr_prefix_turns) alone;
- the queue is bounded: past it requests are skipped and counted; the work starts after the response.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, SMALL_WINDOW, ServerThread, model
from corpus import haystack
from fake_anthropic import FakeAnthropic
from fake_upstream import FakeUpstream

from gateway import create_app
from gateway.config import ConfigError, parse_config
from gateway.core import after_response
from gateway.core.shadow import Figures, Shadow
from gateway.metrics import Metrics
from gateway.prices import Prices

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
UPSTREAM = "shadow-echo"  # both models below reach the upstream under this name
OFF = {"x-mixpr-enabled": "false"}
SHORT = [{"role": "user", "content": "Say hello in one word."}]


def _config(upstream: FakeUpstream, anthropic_url: str) -> dict[str, Any]:
    small = {"max_input_tokens": SMALL_WINDOW, "input_cost_per_token": 2e-6,
             "cache_read_input_token_cost": 2e-7}
    claude = {"model": "anthropic/claude-3-5-haiku-20241022", "api_base": anthropic_url, "api_key": "sk-a"}
    return {"model_list": [model("observed", UPSTREAM, upstream.base_url, model_info=small,
                                 mixpr={"mode": "observe"}),
                           model("plain", UPSTREAM, upstream.base_url, model_info=small),
                           {"model_name": "observed-claude", "litellm_params": claude, "model_info": small,
                            "mixpr": {"mode": "observe"}},
                           {"model_name": "plain-claude", "litellm_params": claude, "model_info": small}],
            "mixpr_settings": {"router": "heuristic", "budget_tokens": 800},
            # Every turn computed (no share of the time to wait out): these tests read each turn's figures.
            "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread",
                                 "compression_workers": 1, "shadow_share": 1}}


@pytest.fixture(scope="module")
def anthropic() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def url(upstream: FakeUpstream, anthropic: FakeAnthropic) -> Iterator[str]:
    server = ServerThread(create_app(parse_config(_config(upstream, anthropic.url)))).start()
    yield server.url
    server.stop()


def _long() -> list[dict[str, Any]]:
    return [{"role": "system", "content": "Answer from the document."},
            {"role": "user", "content": haystack(400) + "\n\nWhat is the secret code?"}]


def _sent(upstream: FakeUpstream, url: str, path: str, body: dict[str, Any],
          headers: dict[str, str] | None = None) -> tuple[httpx.Response, bytes]:
    """The gateway's response, and the body the upstream received for it."""
    before = len(upstream.received(UPSTREAM))
    response = httpx.post(url + path, json=body, headers={**AUTH, **(headers or {})}, timeout=60)
    assert response.status_code == 200, response.text
    [sent] = upstream.received(UPSTREAM)[before:]  # this module's tests run one by one
    return response, sent.raw_body


def _metric(url: str, name: str) -> float:
    pattern = re.compile(rf"^{re.escape(name)} ([0-9.e+-]+)$", re.M)
    found = pattern.search(httpx.get(url + "/metrics").text)
    return float(found.group(1)) if found else 0.0


def _wait_for(url: str, name: str, at_least: float, timeout_s: float = 60) -> float:
    deadline = time.monotonic() + timeout_s
    while (value := _metric(url, name)) < at_least:
        assert time.monotonic() < deadline, f"{name} stayed at {value}"
        time.sleep(0.1)
    return value


BODIES = {
    "chat": ("/v1/chat/completions", {"messages": _long(), "max_tokens": 2500}),
    "chat stream": ("/v1/chat/completions", {"messages": _long(), "max_tokens": 2500, "stream": True}),
    "chat short": ("/v1/chat/completions", {"messages": SHORT, "temperature": 0.5}),
    "responses": ("/v1/responses", {"input": _long()[1]["content"], "instructions": "Be brief.",
                                    "max_output_tokens": 2500}),
    "messages": ("/v1/messages", {"messages": [_long()[1]], "system": "Be brief.", "max_tokens": 2500}),
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_upstream_gets_what_it_gets_with_compression_off(url: str, upstream: FakeUpstream, kind: str) -> None:
    path, body = BODIES[kind]
    # The client's own prompt_cache_key where its API has one: else, with compression off, the
    # gateway adds its own (observe mode does not: the only byte that differs).
    extra = {} if path == "/v1/messages" else {"prompt_cache_key": "client-key"}
    observed, sent = _sent(upstream, url, path, {"model": "observed", **body, **extra})
    plain, off = _sent(upstream, url, path, {"model": "plain", **body, **extra}, OFF)
    assert b"prompt_cache_key" not in sent or extra
    assert sent == re.sub(rb',"prompt_cache_key":"mixpr-[0-9a-f]{16,}"', b"", off)
    assert observed.headers["x-mixpr-action"] == "passthrough"
    assert observed.headers["x-mixpr-shadow"] in ("sampled", "unchanged")
    assert "x-mixpr-shadow" not in plain.headers
    compressed, _ = _sent(upstream, url, path, {"model": "plain", **body, **extra})  # compress mode differs
    if "short" not in kind:
        assert compressed.headers["x-mixpr-action"] == "compressed"


def test_anthropic_relay_gets_what_it_gets_with_compression_off(url: str, anthropic: FakeAnthropic) -> None:
    body = {"messages": [_long()[1]], "system": "Be brief.", "max_tokens": 2500}
    sent = []
    for name, headers in (("observed-claude", {}), ("plain-claude", OFF), ("plain-claude", {})):
        response = httpx.post(url + "/v1/messages", json={"model": name, **body},
                              headers={**AUTH, **headers}, timeout=60)
        assert response.status_code == 200, response.text
        sent.append(anthropic.requests[-1].raw_body)
    assert sent[0] == sent[1] != sent[2]  # compress mode would have cut it
    assert response.headers["x-mixpr-action"] == "compressed"


def test_no_prompt_cache_key_of_the_gateways(url: str, upstream: FakeUpstream) -> None:
    _, sent = _sent(upstream, url, "/v1/chat/completions", {"model": "observed", "messages": SHORT})
    assert b"prompt_cache_key" not in sent
    _, compressed = _sent(upstream, url, "/v1/chat/completions", {"model": "plain", "messages": SHORT})
    assert b"prompt_cache_key" in compressed  # what observe mode leaves out


def test_short_question_says_up_front_what_compressing_would_send(url: str, upstream: FakeUpstream) -> None:
    body = {"messages": SHORT + [{"role": "user", "content": haystack(20)}]}
    observed, _ = _sent(upstream, url, "/v1/chat/completions", {"model": "observed", **body})
    plain, _ = _sent(upstream, url, "/v1/chat/completions", {"model": "plain", **body})
    assert plain.headers["x-mixpr-action"] == "passthrough"
    assert observed.headers["x-mixpr-shadow"] == "unchanged"
    assert observed.headers["x-mixpr-shadow-tokens"] == plain.headers["x-mixpr-compressed-tokens"]
    assert observed.headers["x-mixpr-shadow-saving"] == "0"


def test_compression_off_for_the_request_is_known_unchanged(url: str, upstream: FakeUpstream) -> None:
    messages = [*_long(), {"role": "assistant", "content": "No code."}, {"role": "user", "content": "Sure?"}]
    body = {"model": "observed", "messages": messages}
    observed, _ = _sent(upstream, url, "/v1/chat/completions", body, OFF)
    assert observed.headers["x-mixpr-shadow"] == "unchanged"
    assert observed.headers["x-mixpr-shadow-tokens"] == observed.headers["x-mixpr-original-tokens"]


def test_long_prompt_is_computed_after_the_response_and_counted(url: str, upstream: FakeUpstream) -> None:
    computed = '{model="observed",result="computed"}'
    before = _metric(url, f"mixpr_shadow_requests_total{computed}")
    observed, _ = _sent(upstream, url, "/v1/chat/completions", {"model": "observed", "messages": _long()})
    assert observed.headers["x-mixpr-shadow"] == "sampled"
    assert "x-mixpr-shadow-tokens" not in observed.headers  # known only after the response
    _wait_for(url, f"mixpr_shadow_requests_total{computed}", before + 1)
    original = _metric(url, 'mixpr_shadow_tokens_total{kind="original",model="observed"}')
    would = _metric(url, 'mixpr_shadow_tokens_total{kind="would_send",model="observed"}')
    assert 0 < would < original
    cost = 'mixpr_shadow_cost_total{kind="%s",model="observed",prices="litellm"}'
    assert 0 < _metric(url, cost % "would_send") < _metric(url, cost % "original")


def test_a_conversation_counts_both_sides_cache_and_no_sent_turn(url: str, upstream: FakeUpstream) -> None:
    computed = '{model="observed",result="computed"}'
    before = _metric(url, f"mixpr_shadow_requests_total{computed}")
    messages = [*_long(), {"role": "assistant", "content": "I do not know."},
                {"role": "user", "content": "Look again: what is the secret code?"}]
    observed, _ = _sent(upstream, url, "/v1/chat/completions", {"model": "observed", "messages": messages})
    assert observed.headers["x-mixpr-shadow"] == "sampled"
    _wait_for(url, f"mixpr_shadow_requests_total{computed}", before + 1)
    # The client's previous turn (the long document) is read from the provider's cache.
    assert _metric(url, 'mixpr_shadow_cached_tokens_total{kind="original",model="observed"}') > 1000
    assert 'mixpr_prefix_turns_total{model="observed"' not in httpx.get(url + "/metrics").text


def test_mode_is_checked_and_per_model() -> None:
    entry = {"model_name": "a", "litellm_params": {"model": "openai/a"}, "mixpr": {"mode": "compress"}}
    raw = {"model_list": [entry], "mixpr_settings": {"mode": "observe"}}
    config = parse_config(raw)
    assert config.model("a").settings(config.mixpr_settings).mode == "compress"
    raw["mixpr_settings"]["mode"] = "shadow"
    with pytest.raises(ConfigError, match="mixpr_settings.mode"):
        parse_config(raw)


# -- the queue, without HTTP -------------------------------------------------------------------------

PRICES = Prices(1.0, 0.1, 1.25, "default")


def test_queue_is_bounded_and_skips_are_counted() -> None:
    async def scenario() -> tuple[list[str], float, float]:
        metrics = Metrics()
        shadow = Shadow(2, metrics)
        release = asyncio.Event()

        async def work() -> Figures:
            await release.wait()
            return Figures(100, 40)

        states = [shadow.offer("m", PRICES, work) for _ in range(3)]
        release.set()
        for _ in range(20):
            await asyncio.sleep(0)
        states.append(shadow.offer("m", PRICES, work))  # room again once the two are done
        await asyncio.sleep(0)
        await shadow.aclose()
        skipped = metrics.shadow_skipped.labels("m")._value.get()
        would = metrics.shadow_tokens.labels("m", "would_send")._value.get()
        return states, skipped, would

    states, skipped, would = asyncio.run(scenario())
    assert states == ["sampled", "sampled", "skipped", "sampled"]
    assert skipped == 1
    assert would == 3 * 40  # the three sampled, computed


def test_the_work_keeps_to_its_share_of_the_time() -> None:
    """After a computation of t seconds, none is taken for t * (1 - share) / share: a request then is
    skipped (counted), so the work overlaps at most about that share of the requests (issue 48)."""
    async def scenario() -> tuple[list[str], float, float, float]:
        metrics = Metrics()
        shadow = Shadow(8, metrics, share=0.25)

        async def work() -> Figures:
            await asyncio.sleep(0.05)
            return Figures(100, 40)

        states = [shadow.offer("m", PRICES, work)]
        while shadow.held:
            await asyncio.sleep(0.005)
        ended = time.monotonic()
        states.append(shadow.offer("m", PRICES, work))  # within the pause: skipped
        pause = shadow.resume_at - ended
        await asyncio.sleep(pause + 0.01)
        states.append(shadow.offer("m", PRICES, work))  # past it: taken again
        while shadow.held:
            await asyncio.sleep(0.005)
        await shadow.aclose()
        computed = metrics.shadow_requests.labels("m", "computed")._value.get()
        return states, pause, computed, metrics.shadow_skipped.labels("m")._value.get()

    states, pause, computed, skipped = asyncio.run(scenario())
    assert states == ["sampled", "skipped", "sampled"]
    assert pause >= 3 * 0.05 - 0.01  # 50 ms of work at a quarter of the time: 150 ms without any
    assert (computed, skipped) == (2, 1)


def test_deferred_work_runs_after_the_response_is_sent() -> None:
    events: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        after_response.defer(lambda: events.append("deferred"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def send(message: Any) -> None:
        events.append(message["type"])

    asyncio.run(after_response.AfterResponse(app)({"type": "http"}, None, send))
    assert events == ["http.response.start", "http.response.body", "deferred"]
    after_response.defer(lambda: events.append("at once"))  # outside a request
    assert events[-1] == "at once"


def test_cache_is_not_claimed_twice() -> None:
    # A conversation whose client reads 9,000 of 10,000 tokens from the cache: compressing to 4,000
    # with 3,500 repeated saves far less than the token count says, and a reset (nothing repeated)
    # costs more than sending the client's bytes.
    appended = Figures(10_000, 4_000, 9_000, 3_500, written=True)
    original, would = appended.cost(PRICES)
    assert original == pytest.approx(9_000 * 0.1 + 1_000 * 1.25)
    assert would == pytest.approx(3_500 * 0.1 + 500 * 1.25)
    reset = Figures(10_000, 4_000, 9_000, 0, written=True)
    assert reset.cost(PRICES)[1] > reset.cost(PRICES)[0]
    single = Figures(10_000, 4_000)  # a single question: billed at the input price, nothing cached
    assert single.cost(PRICES) == (10_000.0, 4_000.0)
