"""bench.agent_floor: the least a gateway setting could cost, from one replay's per-step figures."""

from __future__ import annotations

from typing import Any

import pytest

from bench import agent_floor, agent_prices


def _step(k: int, tokens: int, cached: int, action: str | None = None) -> dict[str, Any]:
    return {"k": k, "tokens": tokens, "openai_cached": cached, "anthropic_cached": cached, "action": action,
            "reset": False}


def _results() -> list[dict[str, Any]]:
    # Run 0 passes the trigger at its third step; run 2 (the same half) never does.
    none = [{"id": "a", "index": 0,
             "steps": [_step(1, 2000, 0), _step(3, 3000, 2048), _step(5, 40_000, 2944)]},
            {"id": "b", "index": 2, "steps": [_step(1, 1500, 0), _step(3, 1600, 1408)]}]
    gateway = [{"id": "a", "index": 0, "steps": [_step(1, 2000, 0, "passthrough"),
                                                 _step(3, 3000, 2048, "passthrough"),
                                                 _step(5, 20_000, 0, "compressed")]},
               {"id": "b", "index": 2, "steps": [_step(1, 1500, 0, "passthrough"),
                                                 _step(3, 1600, 1408, "passthrough")]}]
    return [{"setting": "none", "config": None, "runs": none},
            {"setting": "defaults", "config": {}, "runs": gateway}]


def test_the_floor_prices_what_was_passed_through_as_sent_and_the_rest_at_nothing() -> None:
    reference, setting = _results()
    parts = agent_floor.split(reference, setting, "even")["openai"]
    below = 2000 + (3000 - 2048 + 204.8) + 1500 + (1600 - 1408 + 140.8)
    past = 40_000 - 2944 + 294.4
    assert parts["below"] == pytest.approx(below)
    assert parts["past"] == pytest.approx(past)
    assert parts["setting_past"] == pytest.approx(20_000)
    assert parts["never"] == pytest.approx(1500 + 1600 - 1408 + 140.8)


def test_a_step_passed_through_must_be_what_the_client_sent() -> None:
    reference, setting = _results()
    setting["runs"][0]["steps"][1]["tokens"] = 2500
    with pytest.raises(ValueError, match="passed through"):
        agent_floor.split(reference, setting)


def test_the_table_gives_each_half_and_price_list() -> None:
    text = agent_floor.table(_results())
    rows = [line for line in text.splitlines() if line.startswith("| defaults | even")]
    assert len(rows) == len(agent_prices.PRICE_LISTS)
    assert agent_floor.table(_results()[1:]) == ""  # no reference: no floor
