"""The budget: "auto" fills the window's room up to a cap; a number is a cost budget; clear errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import MASTER_KEY, ServerThread, model
from corpus import QUESTION, haystack
from fake_upstream import FakeUpstream

from gateway import create_app
from gateway.compress import policy
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings, parse_config

RESERVE = 1024  # completion_reserve_tokens' default


def _config(base: str) -> dict[str, Any]:
    return {
        "model_list": [
            model("w32k", "w32k", base, model_info={"max_input_tokens": 32000}),
            model("w32k-cost", "w32k-cost", base, model_info={"max_input_tokens": 32000},
                  mixpr={"budget_tokens": 2000}),
            model("w1m", "w1m", base, model_info={"max_input_tokens": 1_000_000},
                  mixpr={"compress_above_tokens": 100_000}),
        ],
        "mixpr_settings": {"router": "heuristic"},  # budget_tokens: auto, max_budget_tokens: 32000
        "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread",
                             "compression_workers": 1, "max_body_bytes": 8_000_000},
    }


@pytest.fixture(scope="module")
def policy_client(upstream: FakeUpstream) -> Iterator[openai.OpenAI]:
    server = ServerThread(create_app(parse_config(_config(upstream.base_url)))).start()
    with openai.OpenAI(base_url=server.url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=120) as c:
        yield c
    server.stop()


def _ask(client: openai.OpenAI, name: str, n_sentences: int, **extra: Any) -> httpx.Headers:
    messages = [{"role": "user", "content": haystack(n_sentences, seed=n_sentences) + "\n\n" + QUESTION}]
    return client.chat.completions.with_raw_response.create(model=name, messages=messages, **extra).headers


def _tokens(headers: httpx.Headers) -> tuple[int, int]:
    assert headers["x-mixpr-action"] == "compressed"
    return int(headers["x-mixpr-original-tokens"]), int(headers["x-mixpr-compressed-tokens"])


def test_auto_fills_the_window(policy_client: openai.OpenAI) -> None:
    """60k tokens to a 32k window: kept close to the room, not cut to a fixed 4k."""
    original, kept = _tokens(_ask(policy_client, "w32k", 3300))
    room = 32000 - RESERVE
    assert original > 60_000
    assert 0.9 * room <= kept <= room


def test_auto_is_capped_by_max_budget_tokens(policy_client: openai.OpenAI) -> None:
    """300k tokens to a 1M window that compresses above 100k: cut to the 32k cap."""
    original, kept = _tokens(_ask(policy_client, "w1m", 16500))
    assert original > 300_000
    assert 0.9 * 32000 <= kept <= 32000 + 16  # the budget, plus message framing


def test_a_number_is_a_cost_budget(policy_client: openai.OpenAI) -> None:
    _, kept = _tokens(_ask(policy_client, "w32k-cost", 3300))
    assert 0.9 * 2000 <= kept <= 2000 + 16


@pytest.mark.parametrize("extra", [{"extra_body": {"mixpr": {"budget_tokens": "auto"}}},
                                   {"extra_headers": {"x-mixpr-budget-tokens": "auto"}}])
def test_a_request_may_ask_for_auto(policy_client: openai.OpenAI, extra: dict[str, Any]) -> None:
    _, kept = _tokens(_ask(policy_client, "w32k-cost", 3300, **extra))
    assert kept >= 0.9 * (32000 - RESERVE)


def test_a_request_budget_overrides_auto(policy_client: openai.OpenAI) -> None:
    _, kept = _tokens(_ask(policy_client, "w32k", 3300, extra_body={"mixpr": {"budget_tokens": 1000}}))
    assert 900 <= kept <= 1000 + 16


def test_max_tokens_that_leaves_no_room_is_lowered(policy_client: openai.OpenAI) -> None:
    """More than the window for the reply: lowered to a quarter of it (gateway.core.reply), not refused."""
    headers = _ask(policy_client, "w32k", 60, max_tokens=40_000)
    assert headers["x-mixpr-action"] == "passthrough"
    assert headers["x-mixpr-max-tokens"] == "40000->8000"


# -- the pure policy ----------------------------------------------------------------------------

AUTO = MixprSettings()
TARGET = Target("gpt-4o", window=128_000, reserve=1000)


def test_auto_budget_is_the_room_up_to_the_cap() -> None:
    small = Target("gpt-4o", window=8192, reserve=1000)
    assert policy.budget(200, small, AUTO, Control()) == 8192 - 1000 - 200
    assert policy.budget(200, TARGET, AUTO, Control()) == 32000
    capped = AUTO.model_copy(update={"max_budget_tokens": 64000})
    assert policy.budget(200, TARGET, capped, Control()) == 64000


def test_number_budget_is_capped_by_the_room() -> None:
    cost = AUTO.model_copy(update={"budget_tokens": 4000})
    assert policy.budget(200, TARGET, cost, Control()) == 4000
    assert policy.budget(200, Target("m", window=3000, reserve=1000), cost, Control()) == 1800
    assert policy.budget(200, TARGET, cost, Control(budget_tokens="auto")) == 32000


def test_explicit_trigger_with_auto_compresses_above_what_auto_keeps() -> None:
    assert policy.threshold(TARGET, AUTO, Control(enabled=True)) == 32000
    assert policy.threshold(Target("m", 8192, 1000), AUTO, Control(enabled=True)) == 7192
    assert policy.threshold(TARGET, AUTO, Control(enabled=True, budget_tokens=500)) == 500
    assert policy.threshold(TARGET, AUTO, Control()) == 127_000


@pytest.mark.parametrize(("fixed", "target", "param", "says"), [
    (7, Target("m", 8192, 9000, "max_tokens"), "max_tokens", "max_tokens=9000 leaves no room"),
    (500, Target("m", 8192, 8000, "max_completion_tokens"), "max_completion_tokens",
     "max_completion_tokens=8000 plus the parts of the prompt that are never compressed (500 tokens)"),
    (9000, Target("m", 8192, 100, "max_tokens"), "messages", "take 9000 tokens"),
    (9000, Target("m", 8192, 1024), "messages", "take 9000 tokens"),
    (9000, Target("m", 8192, 1024, "max_tokens", asked=32000), "messages",
     "with max_tokens lowered from 32000 to 1024"),
])
def test_no_room_blames_what_took_it(fixed: int, target: Target, param: str, says: str) -> None:
    with pytest.raises(policy.ContextLengthExceeded) as caught:
        policy.budget(fixed, target, AUTO, Control())
    assert caught.value.param == param and says in caught.value.message
    assert "8192" in caught.value.message
