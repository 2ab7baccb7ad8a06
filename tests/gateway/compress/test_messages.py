"""The shape of chat messages: one reading for the forms, the resets, the checks and the benches."""

from __future__ import annotations

import json
from typing import Any

from gateway.compress import messages


def _call(i: int, command: str) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def _result(i: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": "ok"}


RUN = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the bug."},
    {"role": "assistant", "content": "", "tool_calls": [_call(1, "ls")]},
    _result(1),
    {"role": "assistant", "content": "", "tool_calls": [_call(2, "cat a.py")]},
    _result(2),
]


def test_calls_and_results_that_do_not_pair_up_are_found() -> None:
    assert messages.pairing(RUN) == []
    assert messages.pairing([*RUN[:5], {**RUN[5], "tool_call_id": "call_9"}])  # a result for no call
    assert messages.pairing(RUN[:5])  # a call without its result at the end
    assert messages.pairing([*RUN[:5], {"role": "user", "content": "go on"}, RUN[5]])  # order broken
    assert messages.pairing([*RUN, _result(2)])  # a second result


def test_parallel_calls_pair_in_any_order_but_all_of_them() -> None:
    parallel = {"role": "assistant", "content": "", "tool_calls": [_call(7, "ls"), _call(8, "pwd")]}
    assert messages.pairing([*RUN[:2], parallel, _result(8), _result(7)]) == []
    assert messages.pairing([*RUN[:2], parallel, _result(8)])


def test_a_message_text_is_its_string_or_its_text_parts() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, image, {"type": "text", "text": "b"}]}
    assert messages.text(parts) == "a\nb"
    assert messages.text({"role": "user", "content": "plain"}) == "plain"
    assert messages.text({"role": "assistant", "content": None}) == ""
    assert not messages.is_text({"type": "text", "text": None})
