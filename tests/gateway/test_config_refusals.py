"""Config that works or says why (issue 57): an ``api_base`` with user-info, which every raw relay
answered with an opaque 500, and an infinite price or share, which passed every bound, are refused at
start-up, naming the field (and never the password)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, parse_config


def _config(params: dict[str, Any] | None = None, **entry: Any) -> dict[str, Any]:
    model = {"model_name": "m", "litellm_params": {"model": "openai/x", **(params or {})}, **entry}
    return {"model_list": [model]}


@pytest.mark.parametrize("base", ["http://user:pa55word@vllm.internal/v1", "https://:pa55word@vllm.internal/v1",
                                  "http://user@vllm.internal:8000/v1"])
def test_an_api_base_with_user_info_is_refused_naming_the_field(base: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(_config({"api_base": base}))
    assert "litellm_params.api_base" in str(refused.value) and "extra_headers" in str(refused.value)
    assert "pa55word" not in str(refused.value)


def test_an_api_base_without_user_info_is_taken() -> None:
    assert parse_config(_config({"api_base": "http://vllm.internal:8000/v1"}))


@pytest.mark.parametrize("entry, field", [
    ({"model_info": {"input_cost_per_token": float("inf")}}, "input_cost_per_token"),
    ({"model_info": {"cache_read_input_token_cost": float("nan")}}, "cache_read_input_token_cost"),
    ({"mixpr": {"code_keep": float("inf")}}, "code_keep"),
    ({"mixpr": {"prefix": {"reset_horizon": float("inf")}}}, "reset_horizon"),
])
def test_an_infinite_price_or_share_is_refused(entry: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_config(_config(**entry))


BASE = "http://127.0.0.1:9/v1"


@pytest.mark.parametrize("params, why", [
    ({"model": "openai/acme-declared", "api_base": BASE, "extra_headers": {"x-a": "b"}}, "extra_headers"),
    ({"model": "hosted_vllm/acme-declared", "api_base": BASE}, "not hosted_vllm/"),
])
def test_a_responses_api_the_relay_cannot_honour_is_a_start_up_warning(
    params: dict[str, Any], why: str, caplog: pytest.LogCaptureFixture,
) -> None:
    from gateway import create_app

    config = parse_config({"model_list": [{"model_name": "m", "litellm_params": params,
                                            "model_info": {"responses_api": True}}]})
    with caplog.at_level("WARNING", logger="gateway.app"):
        create_app(config)
    [said] = [r.getMessage() for r in caplog.records if "responses_api" in r.getMessage()]
    assert "model m" in said and why in said
