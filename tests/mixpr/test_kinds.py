import json
import random
import re
import time

import pytest

from mixpr.kinds import KINDS, resolve, split
from mixpr.kinds.code import commentary
from mixpr.kinds.grep import file_of

PYTHON = "\n".join(
    [
        "import os",
        "from collections import defaultdict",
        "",
        "",
        "class Loader:",
        '    """Loads things."""',
        "",
        "    def __init__(self, path):",
        "        self.path = path",
        "",
        "    def read(self):",
        "        with open(self.path) as handle:",
        "            return handle.read()",
        "",
        "",
        "def main():",
        "    return Loader(os.getcwd()).read()",
    ]
)
NUMBERED = "[File: /repo/src/app/loader.py (300 lines total)]\n" + "\n".join(
    f"{n}:{line}" for n, line in enumerate(PYTHON.splitlines(), start=120)
)
CAT_N = "Here's the result of running `cat -n` on /w/pkg/mod.py:\n" + "\n".join(
    f"{n:>6}\t{line}" for n, line in enumerate(PYTHON.splitlines(), start=1)
)
PYTEST = "\n".join(
    [
        "============================= test session starts ==============================",
        "collected 3 items",
        "",
        "tests/test_a.py .F.                                                      [100%]",
        "",
        "=================================== FAILURES ===================================",
        "___________________________________ test_two ___________________________________",
        "    def test_two():",
        ">       assert add(1, 1) == 3",
        "E       assert 2 == 3",
        "tests/test_a.py:9: AssertionError",
        "=========================== short test summary info ============================",
        "FAILED tests/test_a.py::test_two - assert 2 == 3",
        "========================= 1 failed, 2 passed in 0.02s ==========================",
    ]
)
GREP = "\n".join(
    [
        "src/app/loader.py:12:    def read(self):",
        "src/app/loader.py:40:        self.read()",
        "src/app/cli.py:7:from app.loader import read",
        "tests/test_loader.py:3:def test_read():",
    ]
)
DIFF = "\n".join(
    [
        "diff --git a/src/app/loader.py b/src/app/loader.py",
        "--- a/src/app/loader.py",
        "+++ b/src/app/loader.py",
        "@@ -10,7 +10,7 @@ class Loader:",
        "     def read(self):",
        "-        return open(self.path).read()",
        "+        with open(self.path) as handle:",
        "+            return handle.read()",
        "     def close(self):",
        "@@ -40,3 +40,3 @@ class Loader:",
        "-        pass",
        "+        return None",
        "diff --git a/src/app/cli.py b/src/app/cli.py",
        "--- a/src/app/cli.py",
        "+++ b/src/app/cli.py",
        "@@ -1,3 +1,3 @@",
        "-import sys",
        "+import os",
        " ",
    ]
)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (PYTHON, "code"),
        (NUMBERED, "code"),
        (CAT_N, "code"),
        (PYTEST, "log"),
        (GREP, "grep"),
        (DIFF, "diff"),
        (json.dumps({"items": [{"id": i} for i in range(5)]}, indent=2), "json"),
        (
            "The loader reads a file. It returns its text. Nothing else happens here, as far as we know.",
            "prose",
        ),
    ],
)
def test_auto_detects_the_kind(text, kind):
    assert resolve(text, "auto") == kind


def test_an_explicit_kind_is_kept():
    assert resolve(PYTHON, "log") == "log"
    assert set(KINDS) == {"auto", "code", "log", "json", "grep", "diff", "prose"}


@pytest.mark.parametrize("kind", ["code", "log", "json", "grep", "diff", "prose"])
def test_blocks_cover_the_text_in_order(kind):
    text = PYTHON + "\n" + PYTEST
    blocks = split(text, kind)
    assert list(blocks.starts) == sorted(blocks.starts)
    if kind == "prose":  # sentences: only whitespace lies between them
        assert "".join(blocks.texts()).split() == text.split()
    else:  # line blocks tile the text exactly
        assert "".join(blocks.texts()) == text


def test_code_blocks_open_at_definitions():
    blocks = split(PYTHON, "code")
    firsts = [t.splitlines()[0] for t in blocks.texts()]
    assert "class Loader:" in firsts
    assert "    def read(self):" in firsts
    assert "def main():" in firsts


def test_a_numbered_view_keeps_the_files_line_numbers_and_path():
    blocks = split(NUMBERED, "code")
    assert blocks.numbered
    assert blocks.path == "/repo/src/app/loader.py"
    assert blocks.first_line[1] == 120
    assert blocks.last_line[-1] == 120 + len(PYTHON.splitlines()) - 1


def test_cat_n_view_names_its_file():
    blocks = split(CAT_N, "code")
    assert blocks.numbered and blocks.path == "/w/pkg/mod.py"


def test_log_pins_failure_lines():
    blocks = split(PYTEST, "log")
    pinned = [t.strip() for t, p in zip(blocks.texts(), blocks.pinned, strict=True) if p == 2]
    assert "E       assert 2 == 3" in pinned
    assert "FAILED tests/test_a.py::test_two - assert 2 == 3" in pinned
    assert ">       assert add(1, 1) == 3" in pinned


def test_grep_blocks_hold_one_file_each():
    blocks = split(GREP, "grep")
    for text, label in zip(blocks.texts(), blocks.labels, strict=True):
        assert {line.split(":")[0] for line in text.splitlines()} == {label}
    assert set(blocks.labels) == {"src/app/loader.py", "src/app/cli.py", "tests/test_loader.py"}


def test_grep_file_names_are_read_as_the_patterns_say() -> None:
    """One pass reads the names the old patterns did (checked on many short lines, where they are fast)."""
    named = re.compile(r"^(\S+?\.\w+|\S*/\S+?)(?::\d+[:-]|-\d+-|:)")
    listed = re.compile(r"^\s*(\S*[/\\]\S*|\S+\.\w{1,5})/?\s*$")
    counted = re.compile(r"^(\S+) \(\d+ match(?:es)?\)\s*$")

    def by_patterns(line: str) -> str:
        match = named.match(line)
        if match:
            return match.group(1)
        match = counted.match(line) or listed.match(line)
        return match.group(1).rstrip("/").rsplit("/", 1)[0] if match else ""

    rng = random.Random(7)
    lines = ["".join(rng.choice("ab./:-1 \\py") for _ in range(rng.randint(0, 14))) for _ in range(20_000)]
    lines += [line for line in GREP.splitlines()]
    assert [file_of(line) for line in lines] == [by_patterns(line) for line in lines]


@pytest.mark.parametrize("line", ["/" * 20_000 + " x", "a/" * 10_000 + " x", "a." * 10_000 + ":"])
def test_a_long_line_is_read_in_linear_time(line: str) -> None:
    started = time.perf_counter()
    split("\n".join([line, *GREP.splitlines()]), "grep")
    assert time.perf_counter() - started < 1.0  # the backtracking patterns took 18-40 s


def test_diff_blocks_are_hunks_labelled_by_file():
    blocks = split(DIFF, "diff")
    hunks = [(t, label) for t, label in zip(blocks.texts(), blocks.labels, strict=True) if t.startswith("@@")]
    assert len(hunks) == 3
    assert "+            return handle.read()\n     def close(self):\n" in hunks[0][0]
    assert [label for _, label in hunks] == ["src/app/loader.py", "src/app/loader.py", "src/app/cli.py"]
    assert all(p for t, p in zip(blocks.texts(), blocks.pinned, strict=True) if t.startswith("+++"))


def test_json_items_are_labelled_by_key_path():
    text = json.dumps({"results": [{"id": i, "name": f"n{i}"} for i in range(3)]}, indent=2)
    labels = split(text, "json").labels
    assert "$.results[1]" in labels


TRACEBACK = "\n".join(
    [
        "=================================== FAILURES ===================================",
        "    def test_parse(self):",
        *[f"        self.value_{n} = parse(self.text_{n}, strict={n % 2 == 0})" for n in range(30)],
        ">       self.check(self.value_3)",
        "tests/test_parse.py:40: ValueError",
    ]
)


def test_a_test_failure_is_a_log_even_when_it_quotes_code():
    assert resolve(TRACEBACK, "auto") == "log"


def test_a_licence_header_ranks_below_the_code_of_a_view():
    header = ["/*", " * Licensed under the Apache License, Version 2.0.", " * You may not use it", " */"]
    body = [f"int value{n} = compute({n});" for n in range(12)]
    blocks = split("\n".join(["package demo;", "", *header, "", *body, "}"]), "code")
    licence = next(i for i, t in enumerate(blocks.texts()) if "Licensed" in t)
    code = next(i for i, t in enumerate(blocks.texts()) if "value3 " in t)
    assert blocks.prior[licence] < blocks.prior[code]


def test_comments_and_docstrings_are_commentary():
    lines = ["# licence", '"""Doc', "more doc", '"""', "x = 1", "/* a", " * b", " */", "y = 2"]
    assert commentary(lines).tolist() == [True, True, True, True, False, True, True, True, False]
