"""gateway.prices: a model's input and cache prices from the config, LiteLLM's cost map, or defaults."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.compress.compressor import Compressor
from gateway.config import parse_config
from gateway.core.prepare import ChatCall, Preparer
from gateway.metrics import Metrics
from gateway.prices import Prices, prices_for
from gateway.run.workers import Workers


def test_openai_model_gets_its_own_prices_and_no_write_premium():
    # LiteLLM's cost map: gpt-4o is $2.50 per million input tokens, $1.25 per million cached; OpenAI
    # has no cache write price, so a write costs what input does.
    assert prices_for("openai/gpt-4o") == Prices(2.5e-6, 1.25e-6, 2.5e-6, "litellm", output=1e-5,
                                                 cache_write_hour=2.5e-6)


def test_anthropic_model_gets_its_own_cache_read_and_write_prices():
    prices = prices_for("anthropic/claude-sonnet-4-5")
    assert prices == Prices(3e-6, 3e-7, 3.75e-6, "litellm", output=1.5e-5, cache_write_hour=6e-6)


@pytest.mark.parametrize(("model", "write", "hour"), [
    ("openai/some-local-model", 1.0, 1.0),
    ("hosted_vllm/qwen", 1.0, 1.0),
    ("anthropic/claude-unreleased-9", 1.25, 2.0),
    ("bedrock/claude-private", 1.25, 2.0),
])
def test_unknown_model_gets_relative_defaults(model, write, hour):
    assert prices_for(model) == Prices(1.0, 0.1, write, "default", cache_write_hour=hour)


def test_a_made_up_litellm_entry_is_not_a_price():
    # LiteLLM answers for claude-sonnet-4-20250514 (no longer in its map) with a price of 0 made up
    # from Anthropic's defaults: that would price every saving at $0.
    assert prices_for("anthropic/claude-sonnet-4-20250514") == Prices(1.0, 0.1, 1.25, "default",
                                                                      cache_write_hour=2.0)


def test_model_info_overrides_win_key_by_key():
    info = {"input_cost_per_token": 1e-6, "max_input_tokens": 1000}
    # The read price keeps LiteLLM's ratio for gpt-4o (half of input), the write follows the input.
    expected = Prices(1e-6, pytest.approx(5e-7), 1e-6, "litellm", output=1e-5, cache_write_hour=1e-6)
    assert prices_for("openai/gpt-4o", info) == expected
    full = {"input_cost_per_token": 2e-6, "cache_read_input_token_cost": 2e-7,
            "cache_creation_input_token_cost": 2.5e-6}
    expected = Prices(2e-6, 2e-7, 2.5e-6, "litellm", cache_write_hour=2.5e-6)
    assert prices_for("openai/unknown-model", full) == expected


def test_an_input_price_alone_keeps_the_lists_cache_ratios():
    # Issue 46: Claude Sonnet 4.5 is listed at $3 input, $0.30 reads, $3.75 writes. An operator's
    # contract price of $1.50 input gets reads at 0.10x and writes at 1.25x of it (the list's
    # ratios), not the list's absolute $0.30 and $3.75 (0.20x and 2.50x), which would double what
    # the reset gate thinks a reset saves.
    prices = prices_for("anthropic/claude-sonnet-4-5", {"input_cost_per_token": 1.5e-6})
    assert prices == Prices(1.5e-6, pytest.approx(1.5e-7), pytest.approx(1.875e-6), "litellm", output=1.5e-5,
                            cache_write_hour=pytest.approx(3e-6))


def test_cache_prices_the_operator_sets_stand():
    info = {"input_cost_per_token": 1.5e-6, "cache_read_input_token_cost": 5e-7}
    prices = prices_for("anthropic/claude-sonnet-4-5", info)
    assert prices == Prices(1.5e-6, 5e-7, pytest.approx(1.875e-6), "litellm", output=1.5e-5,
                            cache_write_hour=pytest.approx(3e-6))


def test_an_input_price_alone_scales_the_default_cache_ratios():
    prices = prices_for("anthropic/claude-private", {"input_cost_per_token": 4e-6})
    assert prices == Prices(4e-6, pytest.approx(4e-7), pytest.approx(5e-6), "litellm",
                            cache_write_hour=pytest.approx(8e-6))


def test_prices_from_a_parsed_config_entry():
    config = parse_config({"model_list": [{
        "model_name": "m", "litellm_params": {"model": "openai/gpt-4o"},
        "model_info": {"input_cost_per_token": 3e-6},
    }]})
    entry = config.model("m")
    assert prices_for(entry.upstream_model, entry.model_info.model_dump()).input == 3e-6


def test_a_negative_price_in_the_config_is_a_config_error():
    from gateway.config import ConfigError

    with pytest.raises(ConfigError, match="model_info.input_cost_per_token"):
        parse_config({"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/x"},
                                      "model_info": {"input_cost_per_token": -1}}]})


def test_prices_are_cached_by_model(monkeypatch):
    import gateway.prices as prices

    calls = []
    monkeypatch.setattr(prices, "model_map", lambda model, **kw: calls.append(model) or {})
    prices._prices.cache_clear()
    prices_for("openai/cache-me")
    prices_for("openai/cache-me")
    assert calls == ["openai/cache-me"]
    prices._prices.cache_clear()


# -- one price per model, the reset gate's too -------------------------------------------------------

OPERATOR = {"input_cost_per_token": 3e-6, "cache_read_input_token_cost": 3e-7,
            "cache_creation_input_token_cost": 3.75e-6}


UNUSED = "http://127.0.0.1:9"  # nothing is forwarded


def _listing(step: int, lines: int) -> str:
    return "\n".join(f"{i:5}\tdef handler_{step}_{i}(value):  return parse(value, {i})" for i in range(lines))


def _agent(steps: int, lines: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Make the parser accept trailing commas."}]
    for step in range(steps):
        call = {"id": f"c{step}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{step}.py"})}}
        messages += [{"role": "assistant", "content": f"Reading f{step}.py", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{step}", "content": _listing(step, lines)}]
    return messages


def _past_the_trigger(prices: dict[str, float]) -> Any:
    """The first request of an agent loop whose forms pass its 40k trigger (41k; cost budget 4k,
    resets gated by prices), prepared by a gateway whose model has ``prices`` in its model_info."""
    # code_keep 1: every listing's form at keep_tokens (a code output's larger form would move the sums).
    mixpr = {"router": "heuristic", "budget_tokens": 4000, "compress_above_tokens": 40_000,
             "prefix": {"first_sight": "always", "code_keep": 1.0}}
    entry = {"model_name": "m", "litellm_params": {"model": "openai/acme-internal", "api_base": UNUSED},
             "model_info": {"max_input_tokens": 200_000, **prices}, "mixpr": mixpr}

    async def main() -> Any:
        compressor = Compressor(Workers(workers=1, executor="thread", timeout_s=120), route_cache_size=16)
        await compressor.start(with_router=False)
        preparer = Preparer(parse_config({"model_list": [entry]}), compressor, Metrics())
        try:
            return await preparer.prepare(ChatCall("m", _agent(31, 150)))
        finally:
            await preparer.aclose()
            compressor.close()

    return asyncio.run(main())


def test_the_reset_gate_prices_with_the_models_config_prices():
    # A reset from 41k tokens to 3.6k, with no later turn expected (reset_horizon 0): it saves a
    # tenth of 41k in reads and writes 3.6k. At the defaults (an unknown OpenAI-style model: a write
    # costs what input does) that pays; at the operator's prices (a write 1.25x input) it loses.
    defaults, operators = _past_the_trigger({}), _past_the_trigger(OPERATOR)
    assert defaults.resets == 1 and defaults.final_tokens < 5000
    assert operators.resets == 0, f"reset at the defaults' prices: {operators.reset_saving}"
    assert operators.final_tokens > 40_000
