"""What this instance sent before (``gateway.conversation.sent``): digests that never stall the loop."""

from __future__ import annotations

import json
from typing import Any

from gateway.conversation import sent

LONG = "\t\"quoted\" é \U0001f600 \ud800 \\ line\n" * 10_000  # escapes, astral and lone surrogates


def test_a_message_is_hashed_as_its_canonical_json_in_short_pieces() -> None:
    messages: list[Any] = [
        {"role": "user", "content": LONG},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": LONG[:5000]}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": LONG, "n": 1.5,
                                                             "flag": True, "none": None}]},
        {"role": "user", "content": "", "z": [], "a": {}},
    ]
    for message in messages:
        pieces = list(sent.canonical(message))
        assert "".join(pieces) == json.dumps(message, sort_keys=True)
        assert max(len(p) for p in pieces) <= 6 * sent.CHUNK_CHARS + 2  # an escape is 6 characters at most
    assert len(set(sent.chain(messages, "m"))) == len(messages)
    assert sent.digest(messages[0]) != sent.digest(messages[2])
