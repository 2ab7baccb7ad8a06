"""The query a reset cuts the older messages for: the user's own words and what the agent does now."""

from __future__ import annotations

import json

from gateway.conversation import task


def test_the_query_is_the_users_words_without_a_clients_boilerplate() -> None:
    environment = (
        "<environment_context>\n  <cwd>/work/project</cwd>\n  <shell>bash</shell>\n</environment_context>"
    )
    agents_md = (
        "# AGENTS.md instructions for /work/project\n\n"
        "<INSTRUCTIONS>\nRun ruff before you commit.\n</INSTRUCTIONS>"
    )
    reminder = (
        "<system-reminder>\nThe date is 2026-11-26. Use TodoWrite.\n</system-reminder>\n"
        "Tell me the codeword in f3.txt"
    )
    document = "Clause one of the lease. " * 1000 + "\n\nWhen does the lease end?"
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "Read", "arguments": json.dumps({"file_path": "f9.txt"})},
    }
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": agents_md},
        {"role": "user", "content": environment},
        {"role": "user", "content": reminder},
        {"role": "user", "content": document},
        {"role": "assistant", "content": "Reading the next file.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "text of f9"},
    ]
    query = task.query(messages, len(messages) - 1)
    assert "Tell me the codeword in f3.txt" in query and "When does the lease end?" in query
    assert "Reading the next file." in query and "Read f9.txt" in query  # what the agent does now
    for boilerplate in ("ruff", "/work/project", "TodoWrite", "Clause one", "text of f9"):
        assert boilerplate not in query
    assert task.query(messages, 3) == "Tell me the codeword in f3.txt"  # causal: reads 0..i only


def _regex_sub(text: str) -> str:
    """What the old regular expression removed (slow on unclosed tags, exact otherwise)."""
    import re

    return re.sub(r"<(environment_context|system-reminder|INSTRUCTIONS|user_instructions)>.*?</\1>", "",
                  text, flags=re.DOTALL)


def test_boilerplate_is_removed_as_the_regular_expression_did() -> None:
    texts = [
        "a<system-reminder>x</system-reminder>b",
        "<system-reminder>x<INSTRUCTIONS>y</system-reminder>z</INSTRUCTIONS>w",
        "<system-reminder>open <system-reminder>again</system-reminder> tail</system-reminder>",
        "<INSTRUCTIONS>never closed <environment_context>c</environment_context> end",
        "<user_instructions></user_instructions><user_instructions>u</user_instructions>!",
        "plain </system-reminder> text <system-reminder",
    ]
    for text in texts:
        assert task.without_boilerplate(text) == _regex_sub(text), text


def test_unclosed_tags_take_linear_time() -> None:
    """``<(tag)>.*?</\\1>`` rescanned to the end for each opening never closed: 72 kB took 2 s,
    1 MB minutes. A megabyte of them now takes tens of milliseconds: the bound is far from both, so
    a loaded machine cannot fail it and the quadratic scan cannot pass it. (A ratio of two sizes,
    as this test had, failed on a busy machine at 3.2x: not the user's concern, a hang is.)"""
    import time

    text = "<system-reminder>x" * (1_000_000 // 18)
    started = time.perf_counter()
    assert task.user_words({"role": "user", "content": text + "\n\nWhich file?"}) == "Which file?"
    assert time.perf_counter() - started < 2.0
