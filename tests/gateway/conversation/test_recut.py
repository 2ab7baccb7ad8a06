"""A reset's cut: what the user's own words name is kept ahead of look-alike outputs."""

from __future__ import annotations

import json

from gateway.conversation import forms, recut, task

PROSE = ("The river ran slow past the mill, and the miller's daughter counted the sacks twice before "
         "the carts came down from the hill road in the evening light. ")


def _file(n: int) -> str:
    paragraphs = [PROSE * 3 for _ in range(8)]
    paragraphs.insert(3, f"The codeword is CODE-{n}-word{n}.")
    return "\n\n".join(paragraphs)


def _pieces(files: int) -> list[forms.Piece]:
    out = []
    for n in range(files):
        title = f'Read {json.dumps({"file_path": f"/tmp/work/f{n}.txt"})}'
        path = f"/tmp/work/f{n}.txt"
        out.append(forms.Piece(2 + 2 * n, None, None, "tool", _file(n), "", path, False, True, title=title))
    return out


TASK = "Read the files f0.txt to f14.txt in this folder, one per step. Then tell me the codeword in f3.txt"


def test_the_output_the_task_names_keeps_its_lines_however_tight_the_room() -> None:
    pieces = _pieces(15)
    names = task.named([{"role": "user", "content": TASK}], 0)
    assert {"f3.txt", "f0.txt", "f14.txt"} <= names
    # Room for about one file among fifteen that all match "codeword" equally.
    cut = recut.recut_job(pieces, TASK + "\ncodeword", 15 * recut.PLACEHOLDER_TOKENS + 250, None,
                          frozenset({"f3.txt"}))
    assert "CODE-3-word3" in cut[3][0]
    assert sum("CODE-" in text for text, _ in cut) <= 3  # the look-alikes gave it their room


def test_names_are_found_in_linear_time() -> None:
    for text in ("a/" * 7900, "ab-" * 5000, "a.b/" * 3900, "a_" * 7900):
        assert isinstance(task.named([{"role": "user", "content": text}], 0), frozenset)
    assert task.words('Read {"file_path": "/tmp/work/f3.txt"}') >= {"f3.txt", "tmp/work/f3.txt"}
