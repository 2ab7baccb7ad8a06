"""docs/clients.md cannot fall behind the client tests: its table names each tested client with the
version the tests pin (``agent_clients`` for npm, the installed package for mini-swe-agent, which
requirements.lock pins)."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest
from agent_clients import CLAUDE_CODE, CODEX, OPENCODE, QWEN_CODE, NpmClient

PAGE = Path(__file__).resolve().parents[2] / "docs" / "clients.md"


def _row(package: str) -> list[str]:
    """The cells of the first table row naming ``package`` in backticks."""
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith("|") and f"`{package}`" in line]
    assert rows, f"docs/clients.md's table has no row for {package}"
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


@pytest.mark.parametrize("client", [OPENCODE, QWEN_CODE, CODEX, CLAUDE_CODE], ids=lambda c: c.package)
def test_the_page_gives_each_npm_clients_pinned_version(client: NpmClient) -> None:
    assert _row(client.package)[1] == client.pinned


def test_the_page_gives_mini_swe_agents_locked_version() -> None:
    assert _row("mini-swe-agent")[1] == version("mini-swe-agent")
