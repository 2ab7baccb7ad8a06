"""The one walk over parsed JSON (tool-call arguments) the conversation modules share: its leaves
(strings, numbers, booleans, null) in document order, or the value with each leaf replaced.

Recursive, like ``json.loads`` itself: arguments nested deeper than the interpreter's stack raise
``RecursionError``, which each caller handles (kept as written).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def leaves(value: Any) -> list[Any]:
    """Every leaf of ``value``: dict values in their order, list items in theirs (keys are not leaves)."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


def replaced(value: Any, change: Callable[[Any], Any]) -> Any:
    """``value`` with every leaf ``x`` replaced by ``change(x)``, in the order ``leaves`` lists them."""
    if isinstance(value, dict):
        return {k: replaced(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [replaced(v, change) for v in value]
    return change(value)


def long_strings(value: Any, least: int) -> list[str]:
    """The strings of ``value`` longer than ``least`` characters, in order."""
    return [leaf for leaf in leaves(value) if isinstance(leaf, str) and len(leaf) > least]


def long_replaced(value: Any, least: int, shrink: Callable[[str], Any]) -> Any:
    """``value`` with its strings longer than ``least`` characters replaced by ``shrink`` of them."""
    return replaced(value, lambda leaf: shrink(leaf) if isinstance(leaf, str) and len(leaf) > least else leaf)
