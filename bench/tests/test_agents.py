"""bench.agents on small synthetic agent runs: what a user of the table would notice if it were wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from bench import agent_prices, agents, conversation  # noqa: E402

SECRET = "frobnicate_widget_v2"  # only the first tool output holds it; the last step uses it


def _call(i: int, command: str) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def _run(rounds: int = 8, output_lines: int = 200) -> dict[str, Any]:
    """A run shaped like the dev file: system, task, then assistant tool calls and tool outputs."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": "Fix the widget bug in src/widgets.py."},
    ]
    for i in range(rounds):
        messages.append({"role": "assistant", "content": f"Step {i}: look further.",
                         "tool_calls": [_call(i, f"cat src/part_{i}.py")]})
        lines = [f"{n:4d}    value_{i}_{n} = compute_{i}({n}, 'part {i} line {n}')"
                 for n in range(output_lines)]
        if i == 0:
            lines[3] = f"  88    def {SECRET}(self, size):"
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": "\n".join(lines)})
    messages.append({"role": "assistant", "content": f"The bug is in {SECRET}.",
                     "tool_calls": [_call(rounds, f"grep -n {SECRET} src/widgets.py")]})
    k = len(messages) - 1
    evidence = [{"text": SECRET, "kind": "ident", "msg": 3, "start": 0, "end": len(SECRET), "origin": "tool",
                 "in_prior_assistant": False}]
    return {"id": "synthetic", "framework": "synthetic 1.0", "tools": [], "messages": messages,
            "steps": [{"step": rounds, "msg_index": k, "evidence": evidence}]}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(_run()) + "\n", encoding="utf-8")
    return path


def _main(data: Path, out: Path, *args: str) -> dict[str, dict[str, Any]]:
    return agents.main(["--data", str(data), "--out", str(out), *args])


def test_masking_loses_strict_evidence_and_breaks_the_cache(data: Path, tmp_path: Path) -> None:
    by = _main(data, tmp_path, "--settings", "none,head-tail,mask")
    assert by["none"]["strict"] == 1.0 and by["none"]["strict_n"] == 1
    assert by["mask"]["strict"] == 0.0  # the output that held it is older than the newest five
    assert by["head-tail"]["strict"] == 1.0  # it sits in the first 2,000 characters
    assert by["mask"]["tokens_x"] < 1 < by["mask"]["anthropic_x"]  # fewer tokens, yet dearer: no cache
    assert by["head-tail"]["openai_x"] < 1 and by["head-tail"]["anthropic_x"] < 1
    assert (tmp_path / "agents.json").exists() and (tmp_path / "agents.png").stat().st_size > 0


def test_a_client_that_breaks_pairing_is_counted_invalid(data: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def drop_old_outputs(messages: list[dict], tools: list[dict]) -> tuple[list[dict], list[dict]]:
        tool = [i for i, m in enumerate(messages) if m["role"] == "tool"]
        return [m for i, m in enumerate(messages) if i not in tool[:-2]], tools

    monkeypatch.setitem(agents.CLIENT, "drop", drop_old_outputs)
    by = _main(data, tmp_path, "--settings", "none,drop")
    assert by["none"]["invalid"] == 0
    assert by["drop"]["invalid"] == by["drop"]["steps"] - 3  # every request with over two outputs
    assert "before the results" in by["drop"]["first_invalid"]


def test_an_append_only_sequence_reads_its_prefix_at_a_tenth() -> None:
    run = _run(rounds=4)["messages"]
    tokens = agents.Tokens()
    first, second = tokens.request(run[:4]), tokens.request(run[:6])
    assert len(first) > 1024 and (second[: len(first)] == first).all()
    requests = [agent_prices.Request(first, tokens.parts(run[:4])),
                agent_prices.Request(second, tokens.parts(run[:6]))]
    costs = agent_prices.cached(requests)  # the pricing the table uses
    default = agent_prices.PRICE_LISTS["default"]
    assert costs[1].anthropic(default) == pytest.approx(0.1 * len(first) + 1.25 * (len(second) - len(first)))
    cached = len(first) // 128 * 128
    assert costs[1].openai(default) == pytest.approx(len(second) - cached + 0.1 * cached)
    # bench.conversation's priced, which the table used before, to the last float
    for new, old in zip(costs, conversation.priced([first, second]), strict=True):
        assert (new.openai(default), new.anthropic(default)) == (old["openai"], old["anthropic"])
    # after a pause past the cache's lifetime nothing is read
    cold = agent_prices.cached(requests, [False, True])[1]
    assert cold.openai(default) == len(second) and cold.anthropic(default) == 1.25 * len(second)


def test_cache_reads_compare_messages_first_then_tokens() -> None:
    # Two requests that share two messages, then differ inside the third: the same count as comparing
    # the token arrays whole, whether the shared messages are the same arrays or equal copies.
    a, b, c, d = (np.arange(n, n + 600, dtype=np.int32) for n in (0, 1000, 2000, 3000))
    changed = c.copy()
    changed[250:] += 1
    first = agent_prices.Request(np.concatenate([a, b, c, d]), [a, b, c, d])
    for parts in ([a, b, changed], [a.copy(), b.copy(), changed]):
        second = agent_prices.Request(np.concatenate(parts), parts)
        assert agent_prices.shared_prefix(second, first) == 1450 == conversation.shared_prefix(
            second.tokens, first.tokens)


def test_each_message_is_tokenised_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = agents.rendered
    monkeypatch.setattr(agents, "rendered", lambda ms: calls.append(1) or real(ms))
    run = _run(rounds=3)["messages"]
    tokens = agents.Tokens()
    for k in range(2, len(run) + 1):
        tokens.request(run[:k])
    assert len(calls) == len(run)


def test_evidence_in_tool_call_arguments_counts_as_received() -> None:
    code = 'raise ValueError("\'name\' may not be empty.")'
    call = {"id": "c", "type": "function",
            "function": {"name": "edit", "arguments": json.dumps({"new_str": f"    {code}\n"})}}
    haystack = agents.Tokens().haystack([{"role": "assistant", "content": None, "tool_calls": [call]}])
    assert agents._normal(code) in haystack


def test_a_gateway_setting_over_http_counts_its_errors(data: Path, tmp_path: Path) -> None:
    # A window smaller than the system prompt and the calls, which are never compressed: the gateway
    # must refuse, and the table must count it. It runs as --jobs (default 2) runs a gateway setting,
    # in a process of its own (one: it is the only gateway setting of the call); the defaults, its
    # contrast, here (--jobs 1), for a second process would import the gateway again (issue 59).
    tiny = json.dumps({"model_info": {"max_input_tokens": 64}})
    by = _main(data, tmp_path, "--settings", "none,tiny", "--set", f"tiny={tiny}")
    by |= _main(data, tmp_path / "defaults", "--settings", "defaults", "--jobs", "1")
    assert by["defaults"]["errors"] == 0 and by["defaults"]["invalid"] == 0
    assert by["defaults"]["evidence"] == 1.0  # the run is short: passed through whole
    assert by["tiny"]["errors"] == by["tiny"]["steps"]
    assert by["tiny"]["first_error"].startswith("4")


def test_setting_overlays_go_to_the_model_or_the_top_level() -> None:
    overlay_json = ('{"mixpr": {"budget_tokens": 900}, "general_settings": {"compression_workers": 1}, '
                    '"litellm_params": {"timeout": 5}}')
    [(name, overlay)] = agents.parse_set([f"x={overlay_json}"]).items()
    config = agents.gateway_config("http://127.0.0.1:1/v1", overlay)
    assert name == "x"
    assert config["model_list"][0]["mixpr"] == {"budget_tokens": 900}
    assert config["model_list"][0]["litellm_params"]["model"] == "openai/agent"  # merged, not replaced
    assert config["general_settings"]["compression_workers"] == 1
    assert config["general_settings"]["compression_executor"] == "thread"  # merged, not replaced
    with pytest.raises(SystemExit):
        agents.parse_set(["nojson"])


def _two_runs(tmp_path: Path, middle: bool = False) -> Path:
    """Two runs (the two halves of the split); ``middle``: the secret sits in the first output's middle."""
    rows = []
    for _ in range(2):
        row = _run()
        if middle:
            content = row["messages"][3]["content"].replace(SECRET, "plain_name")
            lines = content.split("\n")
            lines[100] = f"  88    def {SECRET}(self, size):"
            row["messages"][3]["content"] = "\n".join(lines)
            row["steps"][0]["evidence"][0]["start"] = row["messages"][3]["content"].index(SECRET)
        rows.append(json.dumps(row))
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_recovery_resends_the_output_that_held_the_missing_string(tmp_path: Path) -> None:
    data = _two_runs(tmp_path)
    by = _main(data, tmp_path, "--settings", "none,mask")
    result = json.loads((tmp_path / "agents.json").read_text())["results"]
    held = len(agents.Tokens().request([agents.trajectories(data)[0].messages[3]]))
    assert by["none"]["recovered_tokens"] == 0 and by["none"]["openai_recovered_x"] == 1.0
    assert by["mask"]["recovered_tokens"] == 2 * held  # one output, once, in each of the two runs
    last = result[1]["runs"][0]["steps"][-1]
    assert last["recovery_openai"] == pytest.approx(held + 0.1 * last["last_tokens"])
    assert last["recovery_anthropic"] == pytest.approx(1.25 * held + 0.1 * last["last_tokens"])
    assert by["mask"]["openai_recovered"] == pytest.approx(by["mask"]["openai"] + 2 * last["recovery_openai"])
    assert by["mask"]["openai_recovered_x"] > by["mask"]["openai_x"]


def test_losses_say_whether_a_string_was_cut_at_first_sight_or_later(tmp_path: Path) -> None:
    by = _main(_two_runs(tmp_path, middle=True), tmp_path, "--settings", "none,head-tail,mask")
    assert by["none"]["lost"] == dict.fromkeys(agents.agent_losses.WHERE, 0)
    assert by["head-tail"]["lost"]["first sight"] == 2  # cut when it arrived, in both runs
    assert by["mask"]["lost"]["reset"] == 2  # kept while among the newest five, masked later
    assert by["mask"]["lost"]["first sight"] == 0


def test_a_loss_at_first_sight_in_a_request_that_reset_is_the_last_resort() -> None:
    entry = {"text": "x_y", "msg": 3}
    views = {4: ["a", "b", "c", "d"], 6: ["a", "b", "c", "x_y", "e", "f"]}
    args = ([4, 6], views)
    assert agents.agent_losses.where_lost(entry, *args, {4: False}, agents._normal) == "first sight"
    assert agents.agent_losses.where_lost(entry, *args, {4: True}, agents._normal) == "last resort"
    views[4][3] = "the x_y here"
    assert agents.agent_losses.where_lost(entry, *args, {4: False}, agents._normal) == "reset"
    assert agents.agent_losses.where_lost(entry, [4, 6], {4: ["a"]}, {}, agents._normal) == "unaligned"


def test_each_half_of_the_split_is_measured_alone(tmp_path: Path) -> None:
    data = _two_runs(tmp_path)
    odd = _main(data, tmp_path, "--settings", "none,mask", "--half", "odd")
    whole = _main(data, tmp_path, "--settings", "none,mask")
    assert odd["mask"]["steps"] * 2 == whole["mask"]["steps"]
    assert [t.index for t in agents.half(agents.trajectories(data), "even")] == [0]


def test_the_oracle_keeps_what_head_and_tail_cut_at_the_same_size(tmp_path: Path) -> None:
    by = _main(_two_runs(tmp_path, middle=True), tmp_path, "--settings", "none,head-tail,oracle,oracle-2k")
    assert by["head-tail"]["strict"] == 0.0 and by["oracle"]["strict"] == 1.0 == by["oracle-2k"]["strict"]
    assert by["oracle"]["tokens_x"] == pytest.approx(by["head-tail"]["tokens_x"], abs=0.01)
    assert by["oracle-2k"]["tokens_x"] < by["oracle"]["tokens_x"]


def test_an_oracle_cut_is_the_used_line_then_head_and_tail_within_the_size() -> None:
    text = "\n".join(f"{n:4d}    value_{n} = compute({n})" for n in range(400))
    start = text.index("value_200 ")
    spans = agents.agent_oracle.kept_spans(text, [(9, start, start + 9)], 2000)
    line = (text.rindex("\n", 0, start) + 1, text.index("\n", start) + 1)
    assert line in spans and spans[0][0] == 0 and spans[-1][1] == len(text)
    assert 1990 <= agents.agent_oracle._size(spans) <= 2000
    assert spans[0][1] - spans[0][0] == spans[-1][1] - spans[-1][0]  # head and tail alike
    cut = agents.agent_oracle.cut_text(text, spans)
    assert "value_200 =" in cut and cut.count("characters omitted ...]") == 2
    assert cut.startswith(text[:100]) and cut.endswith(text[-100:])


def test_the_signal_table_labels_the_line_a_later_step_uses(tmp_path: Path) -> None:
    from bench import agent_signals

    [run] = agents.trajectories(_two_runs(tmp_path))[:1]
    lines = list(agent_signals.run_lines(run))
    used = [x for x in lines if x.used]
    assert len(used) == 1 and used[0].used_late and used[0].half == "even"
    assert "position: first 2,000 chars" in used[0].signals and "tool: bash" in used[0].signals
    assert len(lines) == 8 * 200  # every non-blank line of the eight long outputs
    share, with_, without, lift, recall = agent_signals._stats(lines, "position: first 2,000 chars")
    assert recall == 1.0 and without == 0.0 and lift == pytest.approx(1 / share)
    # used at the last step, 8 steps after the output was first sent
    assert agent_signals.recency([run])["even"]["6-10 steps"][:2] == [1, 1]
    assert "| position: first 2,000 chars |" in agent_signals.report([run])


def test_signals_are_printed_instead_of_the_settings(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert _main(_two_runs(tmp_path), tmp_path, "--signals") == {}
    out = capsys.readouterr().out
    assert "MixPR keeps it" in out and "age of the step" in out and "even: lift / recall" in out
