"""``anthropic-beta`` on the Messages relay (``gateway.upstream.betas``): only the flags of
``general_settings.anthropic_betas`` reach the operator's Anthropic account; the others are dropped
and each logged once. Sent by the official SDK, with the flags Claude Code 2.1 sends."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from conftest import MASTER_KEY, ServerThread
from fake_anthropic import FakeAnthropic

from gateway import create_app
from gateway.config import ANTHROPIC_BETAS, parse_config

CLAUDE_CODE = ["claude-code-20250219", "interleaved-thinking-2025-05-14", "context-management-2025-06-27",
               "mid-conversation-tool-changes-2026-07-01", "thinking-token-count-2026-05-13",
               "advanced-tool-use-2025-11-20", "effort-2025-11-24"]
COSTLY = ["context-1m-2025-08-07", "code-execution-2025-05-22"]  # another price; tools run on the account


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


def _gateway(fake: FakeAnthropic, **general: object) -> ServerThread:
    claude = {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-3-5-haiku-20241022",
                                                         "api_base": fake.url, "api_key": "sk-a"}}
    config = {"model_list": [claude], "mixpr_settings": {"router": "heuristic"},
              "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread",
                                   "compression_workers": 1, **general}}
    return ServerThread(create_app(parse_config(config))).start()


def _send(url: str, betas: list[str]) -> None:
    import anthropic
    client = anthropic.Anthropic(base_url=url, api_key=MASTER_KEY, max_retries=0)
    client.beta.messages.create(model="claude", max_tokens=20, betas=betas,
                                messages=[{"role": "user", "content": "hi"}])


def test_only_allowed_betas_reach_the_upstream_and_each_drop_is_logged_once(
        fake: FakeAnthropic, caplog: pytest.LogCaptureFixture) -> None:
    server = _gateway(fake)
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.upstream.betas"):
            for _ in range(2):
                _send(server.url, CLAUDE_CODE + COSTLY)
    finally:
        server.stop()
    for seen in fake.requests[-2:]:
        assert seen.headers["anthropic-beta"].split(",") == CLAUDE_CODE
    dropped = [r.getMessage() for r in caplog.records if r.name == "gateway.upstream.betas"]
    assert len(dropped) == len(COSTLY) and all(any(flag in line for line in dropped) for flag in COSTLY)
    assert set(CLAUDE_CODE) <= set(ANTHROPIC_BETAS)


def test_only_disallowed_betas_send_no_header(fake: FakeAnthropic) -> None:
    server = _gateway(fake)
    try:
        _send(server.url, COSTLY)
    finally:
        server.stop()
    assert "anthropic-beta" not in fake.requests[-1].headers


def test_a_star_forwards_every_beta(fake: FakeAnthropic) -> None:
    server = _gateway(fake, anthropic_betas=["*"])
    try:
        _send(server.url, COSTLY)
    finally:
        server.stop()
    assert fake.requests[-1].headers["anthropic-beta"].split(",") == COSTLY
