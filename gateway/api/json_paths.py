"""Values at paths in a client's JSON request, and copies of it with some of them written.

Both raw relays (Anthropic Messages, OpenAI Responses) send the client's own request with only the
compressed texts changed: a view of it is compressed, each view text tagged with the path of its
text in the request, and the kept texts are written back at those paths. Only the containers on a
written path are copied, so everything else is the client's, unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

Path = tuple[str | int, ...]


def get(node: Any, path: Path) -> Any:
    """The value at ``path`` in ``node``."""
    for key in path:
        node = node[key]
    return node


def replaced(node: Any, writes: Sequence[tuple[Path, Any]]) -> Any:
    """A copy of ``node`` with each ``(path, value)`` written; only the containers on a path copied."""
    if any(not path for path, _ in writes):
        return next(value for path, value in writes if not path)
    groups: dict[Any, list[tuple[Path, Any]]] = defaultdict(list)
    for path, value in writes:
        groups[path[0]].append((path[1:], value))
    copy: Any = list(node) if isinstance(node, list) else dict(node)
    for key, sub in groups.items():
        copy[key] = replaced(node[key], sub)
    return copy
