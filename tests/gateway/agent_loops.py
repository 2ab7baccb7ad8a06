"""Coding-agent loops in chat format for the multi-turn tests: a task, then tool calls whose results
are long file views (this repository's own source, numbered like ``cat -n``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TASK = "Fix the bug: the gateway forwards a compressed request whose tool results lost their calls."
FILES = [
    "gateway/compress/conversation.py",
    "gateway/compress/compressor.py",
    "gateway/config.py",
    "gateway/core/chat.py",
    "gateway/api/openai_responses.py",
    "gateway/metrics.py",
    "gateway/run/workers.py",
    "gateway/api/anthropic_messages.py",
]


def view(path: str) -> str:
    """A file view as an agent's editor shows it: numbered lines."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    return f"Here's the result of running `cat -n` on {path}:\n" + "\n".join(
        f"{i:6}\t{line}" for i, line in enumerate(lines, 1)
    )


def call(number: int, path: str) -> dict[str, Any]:
    arguments = json.dumps({"command": "view", "path": path})
    function = {"name": "editor", "arguments": arguments}
    return {"id": f"call_{number}", "type": "function", "function": function}


def chat_loop(steps: int, *, parallel: bool = False, task: str = TASK) -> list[list[dict[str, Any]]]:
    """The request of every step of an agent loop in chat format: a call (or two in parallel), results."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": task},
    ]
    requests = []
    for step in range(steps):
        paths = ([FILES[(2 * step) % len(FILES)], FILES[(2 * step + 1) % len(FILES)]] if parallel
                 else [FILES[step % len(FILES)]])
        calls = [call(10 * step + k, path) for k, path in enumerate(paths)]
        messages = [*messages, {"role": "assistant", "content": f"Step {step}: reading the code.",
                                "tool_calls": calls}]
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": view(p)}
                     for c, p in zip(calls, paths, strict=True)]
        requests.append(messages)
    return requests
