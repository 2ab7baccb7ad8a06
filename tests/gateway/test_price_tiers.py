"""Issue 56: a request that would pass its model's long-context price line (every token billed at 5x
past it, say) is cut to just under the line; one under it, or to a model with no tier, goes as sent;
a conversation growing past the line resets once and then extends what it sent byte for byte.
In-process gateway (uvicorn in a thread) in front of the tests' recording upstream, on real text
(Python's language reference, in every Python)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pydoc_data.topics import topics
from typing import Any

import httpx
import pytest
from conftest import ServerThread
from fake_upstream import FakeUpstream

from gateway import create_app
from gateway.config import parse_config
from gateway.prices import prices_for
from mixpr.tokens import count_tokens

LINE = 40_000  # the tier's line: every input token of a longer request is billed at 5x
MARGIN = 1_024  # price_tiers.margin_tokens' default: completion_reserve_tokens
WINDOW = 200_000
BASE = 1e-6
TIER = {"input_cost_per_token": BASE, "input_cost_per_token_above_40k_tokens": 5 * BASE,
        "cache_read_input_token_cost": BASE / 10, "cache_read_input_token_cost_above_40k_tokens": BASE / 2}
REFERENCE = "\n\n".join(topics[name] for name in sorted(topics))


def _entry(name: str, upstream: FakeUpstream, info: dict[str, Any], **mixpr: Any) -> dict[str, Any]:
    return {"model_name": name, "model_info": {"max_input_tokens": WINDOW, **info},
            "litellm_params": {"model": f"openai/{name}", "api_base": upstream.base_url, "api_key": "x"},
            **({"mixpr": mixpr} if mixpr else {})}


@pytest.fixture(scope="module")
def gateway(upstream: FakeUpstream) -> Iterator[str]:
    config = {"model_list": [_entry("tiered", upstream, TIER), _entry("plain", upstream, {}),
                             _entry("off", upstream, TIER, price_tiers={"enabled": False})],
              "mixpr_settings": {"router": "heuristic", "token_margin": 0},
              "general_settings": {"compression_workers": 1, "compression_executor": "thread",
                                   "compression_timeout_s": 120}}
    server = ServerThread(create_app(parse_config(config))).start()
    try:
        yield server.url
    finally:
        server.stop()


def _text(tokens: int, start: int = 0) -> str:
    """About ``tokens`` tokens of the reference from character ``start``."""
    return REFERENCE[start: start + 4 * tokens]


def _send(upstream: FakeUpstream, url: str, model: str,
          messages: list[dict[str, Any]]) -> tuple[httpx.Response, list[dict[str, Any]]]:
    upstream.clear()
    with httpx.Client(base_url=url, timeout=600) as http:
        response = http.post("/v1/chat/completions", json={"model": model, "messages": messages,
                                                            "max_tokens": 100})
    assert response.status_code == 200, response.text[:300]
    [seen] = [r.json["messages"] for r in upstream.received() if r.path.endswith("/chat/completions")]
    return response, seen


def _tokens(messages: list[dict[str, Any]]) -> int:
    return sum(count_tokens(str(m.get("content") or ""), None) for m in messages)


def _over_the_line() -> list[dict[str, Any]]:
    question = "Which pdb command prints the return value for the last return of the current function?"
    return [{"role": "user", "content": _text(46_000) + "\n\n" + question}]


def test_a_request_past_the_line_is_cut_to_just_under_it(upstream: FakeUpstream, gateway: str) -> None:
    """About 46k tokens to a 200k-window model billed 5x past 40k: cut under the line, and no further
    than its margin (the window alone would send it whole; a cut to the window's 32k cap would be
    deeper than the tier needs)."""
    messages = _over_the_line()
    assert _tokens(messages) > LINE
    response, seen = _send(upstream, gateway, "tiered", messages)
    assert response.headers["x-mixpr-action"] == "compressed"
    sent = int(response.headers["x-mixpr-compressed-tokens"])
    assert LINE - 2 * MARGIN - 500 < sent <= LINE - MARGIN
    assert _tokens(seen) <= LINE
    assert response.headers["x-mixpr-price-tier"] == "billed=base; kept-under=40000"


def test_a_request_under_the_line_goes_as_sent(upstream: FakeUpstream, gateway: str) -> None:
    messages = [{"role": "user", "content": _text(30_000) + "\n\nWhat is a generator?"}]
    response, seen = _send(upstream, gateway, "tiered", messages)
    assert response.headers["x-mixpr-action"] == "passthrough"
    assert seen == messages
    assert response.headers["x-mixpr-price-tier"] == "billed=base"


@pytest.mark.parametrize("model", ["plain", "off"])
def test_a_model_without_a_tier_or_with_tiers_off_sends_it_whole(upstream: FakeUpstream, gateway: str,
                                                                 model: str) -> None:
    messages = _over_the_line()
    response, seen = _send(upstream, gateway, model, messages)
    assert response.headers["x-mixpr-action"] == "passthrough"
    assert seen == messages
    # Tiers off: sent whole, and the header says what it is billed at.
    expected = {"plain": None, "off": "billed=above-40k"}[model]
    assert response.headers.get("x-mixpr-price-tier") == expected


def test_a_conversation_growing_past_the_line_resets_once_then_extends_what_it_sent(
        upstream: FakeUpstream, gateway: str) -> None:
    """A chat that pastes a new 6k-token section of the reference each turn: under the line every
    request goes as the client sent it; the turn that would pass it is cut under it (one reset); the
    turns after it send that request's messages again byte for byte, then their own, still under."""
    messages: list[dict[str, Any]] = []
    sent: list[list[dict[str, Any]]] = []
    resets = []
    for turn in range(9):
        section = _text(6_000, start=turn * 24_000)
        messages = [*messages, {"role": "user", "content": f"{section}\n\nSummarise section {turn}."}]
        response, seen = _send(upstream, gateway, "tiered", messages)
        sent.append(seen)
        resets.append(response.headers["x-mixpr-reset"] == "true")
        assert _tokens(seen) <= LINE, f"turn {turn} went out past the line"
        messages = [*messages, {"role": "assistant", "content": f"Section {turn} is about Python."}]
    crossed = next(n for n, seen in enumerate(sent) if seen != _client(messages, len(seen)))
    assert crossed >= 5, "a request under the line was changed"
    assert all(seen == _client(messages, len(seen)) for seen in sent[:crossed])
    assert resets.count(True) == 1 and resets[crossed], resets
    for before, after in zip(sent[crossed:], sent[crossed + 1:], strict=False):
        assert after[: len(before)] == before  # the provider's cached prefix stays valid


def _client(messages: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The client's own first ``count`` messages."""
    return messages[:count]


def test_the_configs_tier_prices_override_litellms_map() -> None:
    # gpt-5.5 is listed at 2x input past 272k; an operator whose contract bills that tier at the
    # base prices has no tier to keep under, and one who adds a line has that line.
    assert prices_for("openai/gpt-5.5").line(1_050_000) == 272_000
    flat = {"input_cost_per_token_above_272k_tokens": 5e-6,
            "cache_read_input_token_cost_above_272k_tokens": 5e-7,
            "output_cost_per_token_above_272k_tokens": 3e-5}
    assert prices_for("openai/gpt-5.5", flat).line(1_050_000) is None
    lower = {"input_cost_per_token_above_128k_tokens": 7e-6}
    assert prices_for("openai/gpt-5.5", lower).line(1_050_000) == 128_000


def test_a_line_at_or_past_the_window_is_no_line() -> None:
    assert prices_for("openai/gpt-5.5").line(272_000) is None
    assert prices_for("openai/gpt-4o").tiers == ()


def test_observe_mode_sends_it_whole_and_counts_what_keeping_under_the_line_would_save() -> None:
    """Observe mode: the request past the line goes as sent (and its header says it is billed above
    the line); the would-have figures price the client's bytes at the tier's 5x and the cut under the
    line at the base price."""
    from conftest import model

    from gateway.compress.compressor import Compressor
    from gateway.core.prepare import ChatCall, Preparer
    from gateway.metrics import Metrics
    from gateway.run.workers import Workers

    entry = model("m", "openai/observed", "http://127.0.0.1:9",
                  model_info={"max_input_tokens": WINDOW, **TIER},
                  mixpr={"mode": "observe", "router": "heuristic"})
    config = parse_config({"model_list": [entry], "mixpr_settings": {"token_margin": 0},
                           "general_settings": {"shadow_share": 1}})

    async def main() -> tuple[Any, float, float]:
        compressor = Compressor(Workers(workers=1, executor="thread", timeout_s=120), route_cache_size=16)
        await compressor.start(with_router=False)
        preparer = Preparer(config, compressor, Metrics())
        try:
            outcome = await preparer.prepare(ChatCall("m", _over_the_line()))
            for _ in range(6000):
                if preparer.shadow.held == 0:
                    break
                await asyncio.sleep(0.01)
            cost = preparer.metrics.shadow_cost
            return (outcome, cost.labels("m", "original", "litellm")._value.get(),
                    cost.labels("m", "would_send", "litellm")._value.get())
        finally:
            await preparer.aclose()
            compressor.close()

    outcome, original, would_send = asyncio.run(main())
    assert outcome.messages == _over_the_line() and outcome.tier == "billed=above-40k"
    assert original == pytest.approx(5 * BASE * outcome.original_tokens)
    assert BASE * (LINE - 3 * MARGIN) < would_send <= BASE * LINE
