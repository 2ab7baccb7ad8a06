"""Scheduling of the test run: a pytest plug-in ``make test`` loads (``-p tests.scheduling``, with
pytest-xdist's ``--dist loadfile --no-loadscope-reorder``).

Each file runs on one worker, and workers take files in collection order. The files below take tens of
seconds each on the 2-core machine (the processes they start: gateways, LiteLLM's proxy, the embedded
model, Chromium, npm clients), so they are collected first, longest first: started last, one of them
kept a single worker busy for a minute while the others had nothing left to run. A file missing from
the list only runs in its usual place."""

from __future__ import annotations

import pytest

LONG_FIRST = (
    "tests/gateway/ui/test_page_browser.py",
    "tests/gateway/test_startup.py",
    "tests/e2e/test_embedded_model.py",
    "tests/gateway/plugins/test_litellm_guardrail.py",
    "tests/gateway/plugins/test_plugin_host.py",
    "tests/gateway/conversation/test_history_builds.py",
    "tests/test_examples.py",
    "tests/gateway/edge/test_unexpected_errors.py",
    "tests/gateway/local/test_local_model.py",
    "tests/gateway/test_leaky_upstream.py",
    "tests/gateway/conversation/test_history.py",
    "tests/gateway/test_client_opencode.py",
    "tests/gateway/plugins/test_litellm_headroom.py",
    "tests/gateway/upstream/test_chat_relay.py",
    "bench/tests/test_agents.py",
    "tests/mixpr/test_cli.py",
    "tests/gateway/conversation/test_shared_forms.py",
    "tests/gateway/upstream/test_http_policy.py",
    "tests/gateway/test_redaction_properties.py",
    "tests/gateway/test_decoded_redaction.py",
    "tests/gateway/test_client_qwen_code.py",
    "tests/gateway/test_client_codex_relay.py",
    "tests/gateway/test_client_mini_swe_agent.py",
    "tests/gateway/test_gateway_cli.py",
    "tests/gateway/test_client_claude_code.py",
    "tests/gateway/conversation/test_document_conversations.py",
    "tests/gateway/conversation/test_document_followups.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long files first, in ``LONG_FIRST``'s order; the rest after, in their own order."""
    rank = {path: i for i, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
