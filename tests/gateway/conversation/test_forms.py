"""The parts of per-message forms one by one: what a piece is, the checks before forwarding, and the
event loop staying free while a long conversation is prepared."""

from __future__ import annotations

import hashlib
import json
import random
import tracemalloc
from typing import Any

import pytest

from gateway.compress import messages as shape
from gateway.conversation import checks, forms
from mixpr.tokens import count_tokens

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


def test_a_first_sight_form_of_dense_text_stays_within_a_small_budget() -> None:
    """CJK is about a token a character, so edges sized at 4 characters a token overran (issue 41: 30
    tokens asked, 136 sent): the head and tail were snapped to line ends up to 200 characters away, a
    dense line of 800 characters was one block bigger than the budget, and the marker came on top."""
    rng = random.Random(0)
    dense = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(3000))
    for text in (dense, "\n".join(dense[i : i + 80] for i in range(0, 3000, 80))):
        for asked in (5, 10, 30, 60, 100, 200):
            assert count_tokens(forms.edged(text, asked, "what does it say", None, None)) <= asked


def test_a_file_view_keeps_more_at_first_sight_than_a_log_of_its_length() -> None:
    """Agents quote the files they read steps later, rarely a log's lines (``prefix.code_keep``); a
    small budget still holds a few steps (at most a third of the cap)."""
    messages = _loop(1, size=600)
    log = "\n".join(f"[INFO] step {i}: fetched package-{i}.tar.gz ({i % 7} MB) OK" for i in range(600))
    messages.append({**messages[-1], "content": log})
    view, logged = [p for p in forms.pieces(messages) if p.role == "tool"]
    tokens = count_tokens(view.text, None)
    asked = [forms.budget(p, tokens, forms.Prefix(), cap=8000) for p in (view, logged)]
    assert asked[0] is not None and asked[1] is not None and asked[0] > asked[1] + 1000
    assert forms.budget(view, tokens, forms.Prefix(), cap=3000) == 1000 + int(0.02 * (tokens - 1000))


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
    assert kept.startswith(long[:50]) and kept.endswith(long[-30:])
    assert len(kept) < 200  # about 50 tokens of a 2,700-token file: the agent reads the result, not its call


def test_arguments_that_keep_nothing_keep_what_names_the_call() -> None:
    """A reset that leaves a call's arguments no room keeps their short identifying fields (the file
    it wrote, a name, a flag) beside the note of what was omitted; the long ones go."""
    long = "\n".join(f"line {i}: value = compute_{i}(x)" for i in range(300))
    arguments = json.dumps({"path": "src/parser.py", "mode": "overwrite", "create": True, "file_text": long})
    call = forms.Piece(2, None, 0, "assistant", arguments, "", None, False, False)
    form, _ = forms.form_job(call, 0, None)
    parsed = json.loads(form)
    assert parsed["path"] == "src/parser.py" and parsed["mode"] == "overwrite" and parsed["create"] is True
    assert "file_text" not in parsed and "omitted" in parsed
    assert len(form) < 200


def _mini_swe_agent() -> list[dict[str, Any]]:
    """mini-swe-agent's text-based loop: each command's output comes back as a user message in its
    ``<returncode>``/``<output>`` frame."""
    listing = "\n".join(f"{i:5}\tdef handler_{i}(value):  return parse(value, {i})" for i in range(400))
    return [{"role": "system", "content": "You are a helpful assistant that can run bash commands."},
            {"role": "user", "content": "Fix parse_value in src/parser.py so that trailing commas parse."},
            {"role": "assistant",
             "content": "Let me read it.\n\n```mswea_bash_command\ncat src/parser.py\n```"},
            {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{listing}\n</output>"},
            {"role": "assistant", "content": "Now the tests.\n\n```mswea_bash_command\nls tests\n```"},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\ntest_parser.py\n</output>"}]


def test_a_mini_swe_agent_observation_is_a_tool_output() -> None:
    """Its observation is cut as a tool output, for the command that produced it and the task (head,
    tail and the middle's best lines), not kept as a question's last 2,000 characters; and it is not
    the user's words in a reset's query."""
    from gateway.conversation import task

    messages = _mini_swe_agent()
    found = {p.message: p for p in forms.pieces(messages)}
    observation = found[3]
    assert not observation.question and observation.first_sight
    assert "cat src/parser.py" in observation.query and "trailing commas" in observation.query
    assert found[1].question  # the task itself is the user's
    query = task.query(messages, len(messages) - 1)
    assert "handler_7" not in query and "test_parser.py" not in query and "trailing commas" in query
