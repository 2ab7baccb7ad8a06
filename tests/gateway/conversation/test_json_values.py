"""The one JSON walk: leaves in document order, and replacing them keeps the shape."""

from __future__ import annotations

from gateway.conversation import json_values

ARGUMENTS = {"path": "src/a.py", "edits": [{"old": "x" * 900, "new": "y"}, 3, None, True], "n": 1.5}


def test_leaves_come_in_document_order_and_keys_are_not_leaves() -> None:
    assert json_values.leaves(ARGUMENTS) == ["src/a.py", "x" * 900, "y", 3, None, True, 1.5]


def test_replacing_long_strings_keeps_everything_else_as_it_was() -> None:
    out = json_values.long_replaced(ARGUMENTS, 800, lambda s: f"<{len(s)}>")
    assert out == {"path": "src/a.py", "edits": [{"old": "<900>", "new": "y"}, 3, None, True], "n": 1.5}
    assert json_values.long_strings(ARGUMENTS, 800) == ["x" * 900]
