"""A cold turn's cut: older tool outputs lose the lines a later message repeats word for word."""

from __future__ import annotations

from gateway.conversation import repeats


def _file(name: str, lines: int) -> str:
    return "\n".join(f"{i:4}\tdef {name}_{i}(value): return parse(value)" for i in range(lines))


def test_the_earlier_copy_loses_the_lines_a_later_one_repeats_and_nothing_is_lost() -> None:
    older = "$ cat a.py\n" + _file("a", 20) + "\nexit 0"
    newer = "$ cat a.py again\n" + _file("a", 10)
    cut = repeats.cut([(older, True), ("only here: " + _file("b", 3), True), (newer, False)])
    assert cut[2] is None  # the newest copy stays whole (and it may not be cut anyway)
    assert cut[1] is None  # nothing of it is repeated
    kept = cut[0]
    assert kept is not None and "[... 10 lines repeated below ...]" in kept
    assert "def a_15(value)" in kept and "def a_5(value)" not in kept
    request = "\n".join(text if c is None else c for (text, _), c in zip(
        [(older, True), ("", True), (newer, False)], cut, strict=True))
    for line in older.split("\n"):  # every line of the original is still somewhere in the request
        assert line.strip() in request


def test_a_short_run_of_repeats_stays() -> None:
    shared = "x = compute(value)"  # one short line: its marker would save nothing
    assert repeats.cut([(f"first\n{shared}\nlast", True), (shared, False)]) == [None, None]


def test_only_what_may_be_cut_is_cut() -> None:
    text = _file("c", 10)
    assert repeats.cut([(text, False), (text, False)]) == [None, None]
    assert repeats.cut([(text, True), (text, False)])[0] == "[... 10 lines repeated below ...]"


def test_a_file_view_renumbered_by_an_edit_is_still_a_copy() -> None:
    view = "\n".join(f"{i:6}\tdef handler_{i}(value): return parse(value)" for i in range(1, 11))
    moved = "\n".join(f"{i + 3:6}\tdef handler_{i}(value): return parse(value)" for i in range(1, 11))
    assert repeats.cut([(view, True), (moved, False)])[0] == "[... 10 lines repeated below ...]"
    editor = "\n".join(f"{12 + i}: x = parse(value, strict={i})" for i in range(3))  # SWE-agent's view
    later = "\n".join(f"{40 + i}: x = parse(value, strict={i})" for i in range(3))
    assert repeats.cut([(editor, True), (later, False)])[0] == "[... 3 lines repeated below ...]"


def test_an_older_note_keeps_its_first_paragraph() -> None:
    reasons = "\n".join(f"Because of reason {k}, the comma fails." for k in range(9))
    kept = repeats.notes(f"I will fix the parser first.\n\n{reasons}")
    assert kept == "I will fix the parser first.\n[... 11 lines of the agent's earlier notes omitted ...]"
    assert repeats.notes("Short note.\n\nAnd a second line.") is None  # a marker would save nothing


def test_an_older_note_of_a_text_based_agent_keeps_its_command() -> None:
    reasons = "\n".join(f"Because of reason {k}, the comma fails." for k in range(9))
    command = "```bash\npytest -x tests/test_parse.py\n```"
    kept = repeats.notes(f"THOUGHT: run the tests.\n\n{reasons}\n\n{command}")
    assert kept is not None and kept.startswith("THOUGHT: run the tests.\n[... ")
    assert kept.endswith(f"omitted ...]\n{command}")
