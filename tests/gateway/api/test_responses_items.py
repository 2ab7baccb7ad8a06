"""Responses input items: the view MixPR compresses, and the write-back that keeps the rest whole."""

from __future__ import annotations

import copy

from gateway.api import responses_items as items

SOURCE = items.SOURCE


def test_string_input_is_one_user_text() -> None:
    body = {"model": "m", "instructions": "Be brief.", "input": "A long question."}
    assert items.view(body) == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": [{"type": "text", "text": "A long question.",
                                                              SOURCE: ["input"]}]}]


def test_view_tags_only_what_may_be_compressed() -> None:
    body = {"model": "m", "input": [
        {"role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Look."},
                                                         {"type": "input_image", "image_url": "data:,"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Hm."}], "encrypted_content": "e"},
        {"type": "function_call", "call_id": "a", "name": "ls", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "b", "name": "apply_patch", "input": "*** Begin"},
        {"type": "function_call_output", "call_id": "a", "output": "x.py"},
        {"type": "custom_tool_call_output", "call_id": "b", "output": [{"type": "input_text", "text": "ok"}]},
        {"type": "compaction", "encrypted_content": "c"},
    ]}
    developer, user, reasoning, calls, out_a, out_b, compaction = items.view(body)
    assert developer == {"role": "system", "content": "Rules."}  # never compressed
    assert user["content"] == [{"type": "text", "text": "Look.", SOURCE: ["input", 1, "content", 0, "text"]},
                               {"type": "image_url"}]
    assert reasoning["name"] == "Hm." and reasoning["content"] == []
    assert [c["id"] for c in calls["tool_calls"]] == ["a", "b"]  # one turn of calls
    assert calls["tool_calls"][1]["function"] == {"name": "apply_patch", "arguments": "*** Begin"}
    assert out_a == {"role": "tool", "tool_call_id": "a",
                     "content": [{"type": "text", "text": "x.py", SOURCE: ["input", 5, "output"]}]}
    assert out_b["content"][0][SOURCE] == ["input", 6, "output", 0, "text"]
    assert compaction == {"role": "assistant", "content": [{"type": "compaction"}]}


def test_write_back_changes_only_the_kept_texts() -> None:
    body = {"model": "m", "input": [{"type": "function_call_output", "call_id": "a", "output": "long " * 9},
                                    {"type": "compaction", "encrypted_content": "c"}], "x": {"y": 1}}
    original = copy.deepcopy(body)
    sent = items.view(body)
    assert items.write_back(body, sent) is body  # nothing compressed: the client's own object
    sent[0]["content"][0]["text"] = "long"
    out = items.write_back(body, sent)
    assert out == {**original, "input": [{**original["input"][0], "output": "long"}, original["input"][1]]}
    assert body == original and out["input"][1] is body["input"][1]  # copied on write only
