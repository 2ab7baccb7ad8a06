"""A cache write the client asked to keep an hour (``cache_control: {"ttl": "1h"}``) is priced at the
1-hour price (Anthropic: 2x input, not the 5-minute write's 1.25x), wherever the gateway prices cache
writes: the reset gate, observe mode's figures and the operator's stats (issue 57)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.compress.compressor import Compressor
from gateway.config import parse_config
from gateway.core.prepare import ChatCall, Preparer
from gateway.metrics import Metrics
from gateway.prices import prices_for
from gateway.run.workers import Workers

UNUSED = "http://127.0.0.1:9"  # nothing is forwarded
HOUR = {"type": "ephemeral", "ttl": "1h"}
# Anthropic-style list prices for a model LiteLLM's map does not know: no 1-hour price of its own.
LISTED = {"input_cost_per_token": 3e-6, "cache_read_input_token_cost": 3e-7,
          "cache_creation_input_token_cost": 3.75e-6}


def test_a_1_hour_write_costs_the_maps_1_hour_price_else_twice_input() -> None:
    # Claude Sonnet 4.5: $3 input, $3.75 a 5-minute write, $6 an hour's write
    # (LiteLLM's cache_creation_input_token_cost_above_1hr).
    listed = prices_for("anthropic/claude-sonnet-4-5")
    assert (listed.cache_write, listed.for_an_hour().cache_write) == (3.75e-6, 6e-6)
    # Past a tier's line, the hour's own price there: Bedrock's Sonnet 4.5, $12 past 200k.
    bedrock = prices_for("bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0").for_an_hour()
    assert bedrock.at(250_000).cache_write == 1.2e-5
    # A contract price scales the list's hour with it; a model the map does not know pays Anthropic's 2x.
    assert prices_for("anthropic/claude-sonnet-4-5", {"input_cost_per_token": 1.5e-6}).for_an_hour(
    ).cache_write == pytest.approx(3e-6)
    assert prices_for("anthropic/acme-internal", LISTED).for_an_hour().cache_write == pytest.approx(6e-6)
    assert prices_for("anthropic/acme-internal").for_an_hour().cache_write == 2.0
    # The operator's own 1-hour price stands; a provider that sells no hour bills a write as ever.
    own = {**LISTED, "cache_creation_input_token_cost_above_1hr": 5e-6}
    assert prices_for("anthropic/acme-internal", own).for_an_hour().cache_write == 5e-6
    assert prices_for("openai/gpt-4o").for_an_hour() == prices_for("openai/gpt-4o")


def _listing(step: int) -> str:
    return "\n".join(f"{i:5}\tdef handler_{step}_{i}(value):  return parse(value, {i})" for i in range(150))


def _agent(steps: int, hour: bool) -> list[dict[str, Any]]:
    """An agent loop reading ``steps`` files, its system prompt marked for an hour when ``hour``."""
    system = {"type": "text", "text": "You are a coding agent.", **({"cache_control": HOUR} if hour else {})}
    messages: list[dict[str, Any]] = [{"role": "system", "content": [system]},
                                      {"role": "user", "content": "Make the parser accept trailing commas."}]
    for step in range(steps):
        call = {"id": f"c{step}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{step}.py"})}}
        messages += [{"role": "assistant", "content": f"Reading f{step}.py", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{step}", "content": _listing(step)}]
    return messages


def _prepared(entry: dict[str, Any], calls: list[ChatCall]) -> tuple[list[Any], Metrics, list[Any]]:
    """``calls`` prepared in turn by a gateway of the one model ``entry``; the outcomes, the metrics
    and the records the operator's stats got. Observe mode's work is awaited."""
    metrics, records = Metrics(), []
    metrics.stats = records.append
    config = parse_config({"model_list": [entry], "general_settings": {"shadow_share": 1}})

    async def main() -> list[Any]:
        compressor = Compressor(Workers(workers=1, executor="thread", timeout_s=120), route_cache_size=16)
        await compressor.start(with_router=False)
        preparer = Preparer(config, compressor, metrics)
        try:
            out = [await preparer.prepare(call) for call in calls]
            for _ in range(6000):
                if preparer.shadow.held == 0:
                    break
                await asyncio.sleep(0.01)
            return out
        finally:
            await preparer.aclose()
            compressor.close()

    return asyncio.run(main()), metrics, records


def _model(mixpr: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    return {"model_name": "m", "litellm_params": {"model": "anthropic/acme-internal", "api_base": UNUSED},
            "model_info": info, "mixpr": {"router": "heuristic", **mixpr}}


def test_the_reset_gate_weighs_the_hours_write() -> None:
    # An agent loop's first request past its 40k trigger (cost mode, 4k budget, resets gated by price,
    # no later turn expected): a reset from about 41k to 4k saves 0.15x of 41k in reads and writes 4k.
    # At a 5-minute write (1.25x) that pays; at the hour's (2x, the client's ttl "1h") it does not.
    mixpr = {"budget_tokens": 4000, "compress_above_tokens": 40_000,
             "prefix": {"first_sight": "always", "code_keep": 1.0}}
    entry = _model(mixpr, {**LISTED, "cache_read_input_token_cost": 4.5e-7, "max_input_tokens": 200_000})
    calls = [ChatCall("m", _agent(31, False)), ChatCall("m", _agent(31, True))]
    (minutes, hour), _, _ = _prepared(entry, calls)
    assert minutes.resets == 1 and minutes.final_tokens < 5000
    assert hour.resets == 0, f"reset at the 5-minute write's price: {hour.reset_saving}"
    assert hour.final_tokens > 40_000


def test_the_stats_price_a_resets_write_at_the_hours_price() -> None:
    # A 12k window: the loop passes it and resets, whatever it costs; the rewritten span is a cache write.
    entry = _model({}, {**LISTED, "max_input_tokens": 12_000})
    calls = [ChatCall("m", _agent(12, False)), ChatCall("m", _agent(12, True))]
    outcomes, _, records = _prepared(entry, calls)
    assert all(o.reset and o.resets >= 1 for o in outcomes)
    for outcome, record, write in zip(outcomes, records, (3.75e-6, 6e-6), strict=True):
        written = outcome.final_tokens - outcome.reused_tokens
        assert record.counts["reset_write_cost"] == pytest.approx(written * (write - 3e-7))


def test_observe_mode_prices_the_clients_hour_long_writes() -> None:
    # A conversation's second turn, sent as it came: what the cache does not hold of the client's bytes
    # is written to it, at the hour's price when the client asked for the hour.
    entry = _model({"mode": "observe"}, {**LISTED, "max_input_tokens": 200_000})
    costs = []
    for hour in (False, True):
        turn = [*_agent(2, hour), {"role": "assistant", "content": "Both read."},
                {"role": "user", "content": "Now fix the parser."}]
        _, metrics, _ = _prepared(entry, [ChatCall("m", _agent(2, hour)), ChatCall("m", turn)])
        value = metrics.registry.get_sample_value
        labels = {"model": "m", "kind": "original"}
        sent = value("mixpr_shadow_tokens_total", labels)
        cached = value("mixpr_shadow_cached_tokens_total", labels)
        cost = value("mixpr_shadow_cost_total", {**labels, "prices": "litellm"})
        costs.append((sent, cached, cost))
    for (sent, cached, cost), write in zip(costs, (3.75e-6, 6e-6), strict=True):
        assert 0 < cached < sent
        assert cost == pytest.approx(cached * 3e-7 + (sent - cached) * write)
