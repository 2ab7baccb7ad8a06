"""gateway.prices: a model's input and cache prices from the config, LiteLLM's cost map, or defaults."""

from __future__ import annotations

import pytest

from gateway.config import parse_config
from gateway.prices import Prices, prices_for


def test_openai_model_gets_its_own_prices_and_no_write_premium():
    # LiteLLM's cost map: gpt-4o is $2.50 per million input tokens, $1.25 per million cached; OpenAI
    # has no cache write price, so a write costs what input does.
    assert prices_for("openai/gpt-4o") == Prices(2.5e-6, 1.25e-6, 2.5e-6, "litellm")


def test_anthropic_model_gets_its_own_cache_read_and_write_prices():
    prices = prices_for("anthropic/claude-sonnet-4-5")
    assert prices == Prices(3e-6, 3e-7, 3.75e-6, "litellm")


@pytest.mark.parametrize(("model", "write"), [
    ("openai/some-local-model", 1.0),
    ("hosted_vllm/qwen", 1.0),
    ("anthropic/claude-unreleased-9", 1.25),
    ("bedrock/claude-private", 1.25),
])
def test_unknown_model_gets_relative_defaults(model, write):
    assert prices_for(model) == Prices(1.0, 0.1, write, "default")


def test_a_made_up_litellm_entry_is_not_a_price():
    # LiteLLM answers for claude-sonnet-4-20250514 (no longer in its map) with a price of 0 made up
    # from Anthropic's defaults: that would price every saving at $0.
    assert prices_for("anthropic/claude-sonnet-4-20250514") == Prices(1.0, 0.1, 1.25, "default")


def test_model_info_overrides_win_key_by_key():
    info = {"input_cost_per_token": 1e-6, "max_input_tokens": 1000}
    # The read price stays LiteLLM's (gpt-4o's), the write price follows the new input price.
    assert prices_for("openai/gpt-4o", info) == Prices(1e-6, 1.25e-6, 1e-6, "litellm")
    full = {"input_cost_per_token": 2e-6, "cache_read_input_token_cost": 2e-7,
            "cache_creation_input_token_cost": 2.5e-6}
    assert prices_for("openai/unknown-model", full) == Prices(2e-6, 2e-7, 2.5e-6, "litellm")


def test_an_input_price_alone_scales_the_default_cache_ratios():
    prices = prices_for("anthropic/claude-private", {"input_cost_per_token": 4e-6})
    assert prices == Prices(4e-6, pytest.approx(4e-7), pytest.approx(5e-6), "litellm")


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
