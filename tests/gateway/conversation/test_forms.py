"""The parts of per-message forms one by one: what a piece is, the checks before forwarding, and the
event loop staying free while a long conversation is prepared."""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from typing import Any

import pytest

from gateway.compress import messages as shape
from gateway.conversation import checks, forms

TASK = "Make the parser accept trailing commas."


def _loop(steps: int, size: int = 400) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Agent."},
        {"role": "user", "content": TASK},
    ]
    for step in range(steps):
        call = {
            "id": f"c{step}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"cat -n f{step}.py"})},
        }
        lines = "\n".join(
            f"{i:6}\tdef handler_{step}_{i}(value):  return parse(value, {i})" for i in range(size)
        )
        messages += [
            {"role": "assistant", "content": f"Reading f{step}.py", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{step}", "content": lines},
        ]
    return messages


def test_a_tool_result_answers_its_call_and_the_task() -> None:
    messages = _loop(2)
    [*_, result] = [p for p in forms.pieces(messages) if p.role == "tool"]
    assert result.message == 5 and result.first_sight and not result.question
    assert 'bash {"command": "cat -n f1.py"}' in result.query and "Reading f1.py" in result.query
    assert result.query.endswith(TASK)


def test_errors_system_and_thinking_are_never_pieces() -> None:
    messages = _loop(2)
    messages[3] = {**messages[3], "content": "Error: no such file f0.py\n" * 50}
    messages[4] = {
        **messages[4],
        "thinking_blocks": [{"type": "thinking", "thinking": "hm", "signature": "s"}],
    }
    found = {(p.message, p.call) for p in forms.pieces(messages, frozenset({"c1"}))}
    assert not {m for m, _ in found} & {0, 3, 4, 5}  # system, an error, a thinking turn, a marked error


def test_arguments_are_compressed_as_json_strings() -> None:
    long = "\n".join(f"line {i}: value = compute_{i}(x)" for i in range(300))
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "write", "arguments": json.dumps({"path": "a.py", "file_text": long})},
    }
    messages = [
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
    ]
    [piece] = [p for p in forms.pieces(messages) if p.call is not None]
    assert piece.first_sight  # cut when first seen when long (argument_tokens), and by resets
    form, tokens = forms.form_job(piece, 100, None)
    parsed = json.loads(form)
    assert parsed["path"] == "a.py" and len(parsed["file_text"]) < len(long) / 4 and tokens < 200


def test_checks_catch_what_providers_reject() -> None:
    messages = _loop(2)
    assert checks.problems(messages, messages) == []
    swapped = [*messages[:3], messages[4], messages[3], *messages[5:]]
    assert shape.pairing(swapped) and checks.problems(messages, swapped)
    broken = json.loads(json.dumps(messages))
    broken[2]["tool_calls"][0]["function"]["arguments"] = "{not json"
    assert any("no longer JSON" in p for p in checks.problems(messages, broken))
    marked = [
        {**m, "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}
        if m["role"] == "tool"
        else m
        for m in messages
    ]
    assert checks.breakpoints(marked) == 2 and not checks.problems(marked, marked)
    changed_system = [{"role": "system", "content": "Other."}, *messages[1:]]
    assert checks.problems(messages, changed_system)


def test_the_cache_is_bounded_and_one_entry_cannot_flush_it() -> None:
    cache = forms.FormCache(64 * 1000)
    for i in range(50):
        cache.put(f"k{i}", ("x" * 300, 10))
    cache.put("huge", ("x" * 10_000, 1))  # over 1/64 of the bound: not kept
    assert cache.get("huge") is None and cache.get("k0") is not None and cache.used <= cache.max_bytes


@pytest.mark.parametrize("chars", [0, 200, 4_000])
def test_the_cache_counts_the_bytes_it_holds(chars: int) -> None:
    """Token counts (no text) were counted 2.7x low, long forms 2x high."""
    cache = forms.FormCache(10**10)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(5_000):
        cache.put(hashlib.blake2b(str(i).encode(), digest_size=20).hexdigest(), ("x" * chars + str(i), i))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert 0.8 < cache.used / held < 1.25


def test_a_reset_cuts_arguments_as_json_and_keeps_a_question_whole() -> None:
    """In a reset's cut, a call's long string values are cut as text and the JSON stays valid; a
    pasted document keeps its question; a result that keeps nothing is a placeholder."""
    from gateway.conversation import recut

    long = "\n".join(f"line {i}: value = compute_{i}(x)" for i in range(300))
    arguments = json.dumps({"path": "a.py", "file_text": long})
    call = forms.Piece(2, None, 0, "assistant", arguments, "", None, False, False)
    pasted = long + "\n\nWhat does line 7 compute?"
    document = forms.Piece(1, None, None, "user", pasted, "", None, True, True)
    noise = forms.Piece(3, None, None, "tool", "\n".join(f"noise {i} here" for i in range(400)), "", None,
                        False, True, 'bash {"command": "ls"}')
    cut = recut.recut_job([call, document, noise], "compute_7 line 7", 300, None)
    [(args, _), (kept, _), (dropped, _)] = cut
    parsed = json.loads(args)
    assert parsed["path"] == "a.py" and len(parsed["file_text"]) < len(long) / 2
    assert kept.endswith("What does line 7 compute?") and "compute_7(x)" in kept
    assert dropped == forms.placeholder(noise)


def test_a_first_sight_form_keeps_what_a_clients_head_and_tail_cut_keeps_and_the_middles_best() -> None:
    """Never behind the cut a client makes alone (the first and last 2,000 characters): the form holds
    both ends, and of the middle the lines the call asks about, numbered as the output's own."""
    lines = [f"{i:5} ok  test_case_{i} passed in 0.0{i % 10}s" for i in range(600)]
    lines[300] = "  300 FAILED test_parser_trailing_comma - AssertionError: expected ',' got EOF"
    output = "\n".join(lines)
    form = forms.edged(output, 2000, "pytest tests/ -k trailing_comma FAILED", None, None)
    assert form.startswith(output[:1900]) and form.endswith(output[-1900:])
    assert lines[300] in form
    head_lines = form[: form.index("[…")].count("\n")
    marker = form[form.index("[…"):]
    assert marker.startswith(f"[… output lines {head_lines + 1}–")  # the output's own numbers
    assert len(form) < len(output) / 3


def test_long_call_arguments_are_cut_at_first_sight_as_json() -> None:
    long = "\n".join(f"line {i}: value = compute_{i}(x)" for i in range(300))
    call = {"id": "c", "type": "function",
            "function": {"name": "write", "arguments": json.dumps({"path": "a.py", "file_text": long})}}
    messages = [
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
    ]
    [piece] = [p for p in forms.pieces(messages) if p.call is not None]
    asked = forms.budget(piece, 3000, forms.Prefix(), cap=8000)
    assert asked == forms.Prefix().argument_tokens
    assert forms.budget(piece, 3000, forms.Prefix(argument_tokens=0), cap=8000) is None
    parsed = json.loads(forms.form_job(piece, asked, None)[0])
    kept = parsed["file_text"]
    assert kept.startswith(long[:100]) and kept.endswith(long[-90:]) and len(kept) < len(long) / 4
