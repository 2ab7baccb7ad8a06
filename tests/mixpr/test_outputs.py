"""compress(kind=...): tool outputs cut by content kind, with markers at every cut."""

import hashlib
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from mixpr.engine import compress
from mixpr.tokens import count_tokens

from .filler import haystack

MARKER = re.compile(r"^\[… .* omitted.* …\]$")


def java_view(
    path: str = "/repo/src/main/java/org/demo/Registry.java", first: int = 1, count: int = 400
) -> str:
    """An editor's numbered view of a long Java file: a header, numbered lines, a footer."""
    lines = [f"[File: {path} ({first + count + 99} lines total)]"]
    for n in range(first, first + count):
        if n % 20 == 0:
            body = f"    public void handle{n}(Request request) {{"
        elif n == first + 237:
            body = "        subscriber.doSubscribe(url, listener);"
        else:
            body = f"        counter{n % 7} += request.size() * {n};"
        lines.append(f"{n}:{body}")
    lines.append("(100 more lines below)")
    return "\n".join(lines)


def pytest_log(passing: int = 300) -> str:
    lines = [
        "============================= test session starts ==============================",
        "collected items",
    ]
    lines += [f"tests/test_mod.py::test_case_{i} PASSED [{i % 100:3d}%]" for i in range(passing)]
    lines += [
        "=================================== FAILURES ===================================",
        "    def test_parse():",
        ">       assert parse('1.0') == (1, 0)",
        "E       AssertionError: assert (1,) == (1, 0)",
        "tests/test_mod.py:88: AssertionError",
    ]
    lines += [f"tests/test_other.py::test_more_{i} PASSED" for i in range(passing)]
    lines += ["FAILED tests/test_mod.py::test_parse - AssertionError", "=== 1 failed, 600 passed in 3.2s ==="]
    return "\n".join(lines)


def non_marker_lines(kept: str) -> list[str]:
    return [line for line in kept.splitlines() if not MARKER.match(line)]


def test_failure_lines_survive_a_hard_cut_of_a_test_log():
    text = pytest_log()
    result = compress(text, budget_tokens=150, kind="auto", query="pytest tests/")
    assert result.stats["kind"] == "log"
    for line in (
        "E       AssertionError: assert (1,) == (1, 0)",
        ">       assert parse('1.0') == (1, 0)",
        "FAILED tests/test_mod.py::test_parse - AssertionError",
        "=== 1 failed, 600 passed in 3.2s ===",
    ):
        assert line in result.text


def test_cut_markers_name_the_files_line_range():
    text = java_view()
    result = compress(text, budget_tokens=400, kind="code", query="open Registry.java doSubscribe")
    markers = [line for line in result.text.splitlines() if MARKER.match(line)]
    assert markers, result.text
    assert re.fullmatch(
        r"\[… lines \d+–\d+ of /repo/src/main/java/org/demo/Registry\.java omitted …\]", markers[0]
    )
    # every omitted range lies between the numbers of the kept lines around it
    shown = [int(m.group(1)) for m in re.finditer(r"^(\d+):", result.text, re.MULTILINE)]
    for marker in markers:
        a, b = map(int, re.search(r"lines (\d+)–(\d+)", marker).groups())
        assert not any(a <= n <= b for n in shown)


def test_the_query_steers_what_a_code_view_keeps():
    text = java_view()
    result = compress(text, budget_tokens=300, kind="code", query="where does the registry call doSubscribe?")
    assert "subscriber.doSubscribe(url, listener);" in result.text


def test_a_source_hint_names_the_file_when_the_text_does_not():
    text = "\n".join(f"{n:>6}\tvalue_{n} = compute({n})" for n in range(1, 400))
    result = compress(text, budget_tokens=300, kind="code", query="value_7", source="pkg/values.py")
    assert "of pkg/values.py omitted" in result.text


def test_unnumbered_output_says_output_lines():
    text = pytest_log()
    result = compress(text, budget_tokens=300, kind="log")
    assert re.search(r"^\[… output lines \d+–\d+ omitted …\]$", result.text, re.MULTILINE)


def test_kept_text_is_original_lines_in_order_within_budget():
    text = java_view()
    result = compress(text, budget_tokens=500, kind="auto", query="handle240")
    assert result.stats["kept_tokens"] == count_tokens(result.text) <= 500
    originals = text.splitlines()
    at = 0
    for line in non_marker_lines(result.text):
        at = originals.index(line, at) + 1
    assert result.spans == sorted(result.spans)
    assert all(text[s:e] in result.text for s, e in result.spans)


def test_grep_cuts_name_the_files_they_removed():
    text = "\n".join(f"src/pkg/module_{i // 5}.py:{i}:    call_{i}(value)" for i in range(400))
    result = compress(text, budget_tokens=200, kind="auto", query="grep call_333")
    assert result.stats["kind"] == "grep"
    assert "src/pkg/module_66.py:333:    call_333(value)" in result.text
    assert re.search(r"omitted: src/pkg/module_\d+\.py", result.text)


def test_json_cuts_name_the_items_they_removed():
    text = json.dumps({"results": [{"id": i, "name": f"item_{i}"} for i in range(200)]}, indent=2)
    result = compress(text, budget_tokens=200, kind="auto", query="item_150")
    assert result.stats["kind"] == "json"
    assert '"name": "item_150"' in result.text
    assert re.search(r"omitted: \$\.results\[\d+–\d+\]", result.text)


def test_one_line_json_is_cut_in_pieces_within_budget():
    text = json.dumps({"results": [{"id": i, "name": f"item_{i}"} for i in range(3000)]})
    result = compress(text, budget_tokens=500, kind="auto", query="item_1742")
    assert result.stats["kept_tokens"] <= 500
    assert '"name": "item_1742"' in result.text
    assert "[… part of output line 1 omitted …]" in result.text


def test_small_outputs_pass_whole():
    text = "def f():\n    return 1\n"
    result = compress(text, budget_tokens=100, kind="auto", query="f")
    assert result.text == text
    assert result.spans == [(0, len(text))]


def test_same_inputs_give_the_same_bytes_in_another_process():
    text = java_view() + "\n" + pytest_log(50)
    here = compress(text, budget_tokens=600, kind="auto", query="doSubscribe test_parse").text
    code = (
        "import sys; from tests.mixpr.test_outputs import java_view, pytest_log; from mixpr import compress; "
        "sys.stdout.write(compress(java_view() + '\\n' + pytest_log(50), budget_tokens=600, kind='auto', "
        "query='doSubscribe test_parse').text)"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert there.stdout == here


# sha256 of the kept text below as main computed it before kinds existed: the default must not move.
TODAY = "e9ae525bb1d1f722d112234894a71e85d4a29e152ba258a52430aebd64dc9940"


def test_default_is_todays_sentence_compression_byte_for_byte():
    text = haystack(2000, {700: "The vault code for orchid-lane is 5521."}, 3) + "\n\nWhat is the vault code?"
    today = compress(text, budget_tokens=300, route="local")
    assert hashlib.sha256(today.text.encode()).hexdigest() == TODAY
    again = compress(text, budget_tokens=300, route="local", kind=None)
    assert (again.text, again.spans) == (today.text, today.spans)
    assert "kind" not in today.stats


@pytest.mark.parametrize(
    "options",
    [
        {"kind": "yaml"},
        {"query": "a question but no kind"},
        {"kind": "code", "top_k": 3},
        {"kind": "code", "query_span": (0, 4)},
        {"kind": "log", "route": "local"},
    ],
)
def test_invalid_kind_options_are_refused(options):
    with pytest.raises(ValueError):
        compress("x " * 500, budget_tokens=10, **options)


def _book(seed: int, codeword: str) -> str:
    import random

    rng = random.Random(seed)
    who = ["The mill", "A carriage", "The vicar", "Her brother"]
    did = ["walked", "waited", "wrote", "rested"]
    lines = [f"{rng.choice(who)} {rng.choice(did)} by the river {seed}-{k}." for k in range(60)]
    lines.insert(30, f"The codeword is {codeword}.")
    return "\n".join(lines) + "\n"


def test_parts_share_one_budget_and_the_named_part_keeps_its_lines():
    """Several outputs under one budget: the one the query names (by its title: the call that read it)
    keeps its codeword line, the others give up their room, each part's cut is marked in its own
    text, and a part that keeps nothing comes back empty."""
    texts = [_book(n, f"word-{n}") for n in range(8)]
    ends = [sum(len(t) for t in texts[: n + 1]) for n in range(8)]
    titles = [f'Read {{"file_path": "f{n}.txt"}}' for n in range(8)]
    def cut(budget: int) -> Any:
        return compress("".join(texts), budget_tokens=budget, kind="auto",
                        query="the codeword written in f3.txt", parts=list(zip(ends, titles, strict=True)))

    result = cut(300)
    assert len(result.parts) == 8 and count_tokens(result.text) <= 300
    assert result.text == "".join(result.parts)
    assert "The codeword is word-3." in result.parts[3]
    assert len(result.parts[3]) == max(len(p) for p in result.parts)  # the named file keeps the most
    assert sum(len(p) for p in result.parts) < len("".join(texts)) / 4
    assert all("omitted" in p for p in result.parts if p)  # every cut is marked in the part it cut
    tight = cut(60)
    assert "The codeword is word-3." in tight.parts[3] and tight.parts.count("") >= 5


def test_relevance_does_not_spread_across_parts():
    """Under one budget, an output that ends on the query's word gave the next output's first lines
    part of its relevance (the chain ran across the boundary): the other output, which shares no
    word with the query, ranked above most of the named one."""
    import numpy as np

    from mixpr import outputs

    named = "".join(f"line {k} of nothing in particular\n" for k in range(20)) + "the zebracorn lives here\n"
    other = "".join("the same quiet line\n" for _ in range(20))
    split = [outputs._split(named, "auto"), outputs._split(other, "auto")]
    owner = np.concatenate([np.full(len(b), i, dtype=np.int64) for i, b in enumerate(split)])
    joined = outputs._joined(named + other, split, [0, len(named)])
    apart = np.array([len(split[0])])
    scores = outputs.block_scores(joined, "zebracorn", (["a", "b"], owner), apart)
    n = len(split[0])
    assert scores[n:].max() < scores[:n].min()
    spread = outputs.block_scores(joined, "zebracorn", (["a", "b"], owner))
    assert spread[n] > spread[:n - 1].max()  # what the boundary let through before


def test_assembled_gives_each_part_its_own_blocks():
    """``_assembled`` by slices of the sorted keep: the same texts as one mask per part."""
    import numpy as np

    from mixpr import outputs

    texts = [f"part {n}\n" + "".join(f"line {k} of part {n}\n" for k in range(5 + n)) for n in range(6)]
    split = [outputs._split(t, "auto") for t in texts]
    owner = np.concatenate([np.full(len(b), i, dtype=np.int64) for i, b in enumerate(split)])
    sizes = np.full(len(owner), 5.0)
    keep = np.sort(np.random.default_rng(1).choice(len(owner), size=len(owner) // 3, replace=False))
    got, parts = outputs._assembled(split, owner, keep, sizes)
    first = np.concatenate(([0], np.cumsum([len(b) for b in split])))
    for i, blocks in enumerate(split):
        mine = keep[owner[keep] == i] - first[i]
        cost = sizes[first[i] : first[i + 1]]
        want = "" if len(mine) == 0 else outputs.markers.assemble(blocks, outputs.filled(mine, cost))
        assert parts[i] == want
    assert set(keep) <= set(got)
