"""Content kinds: each cuts a tool output into the units its readers reuse (one module per kind).

``split(text, kind, source)`` gives ``lines.Blocks`` for one of ``KINDS``; "auto" asks ``detect``.
"""

from __future__ import annotations

from mixpr.kinds import code, detect, diff, grep, jsons, log, prose
from mixpr.kinds.lines import Blocks

KINDS = ("auto", "code", "log", "json", "grep", "diff", "prose")
_SPLITTERS = {
    "code": code.split,
    "log": log.split,
    "json": jsons.split,
    "grep": grep.split,
    "diff": diff.split,
    "prose": prose.split,
}

__all__ = ["KINDS", "Blocks", "resolve", "split"]


def resolve(text: str, kind: str) -> str:
    """``kind`` itself, or for "auto" the kind ``detect`` finds."""
    return detect.detect(text) if kind == "auto" else kind


def split(text: str, kind: str, source: str | None = None) -> Blocks:
    """``text`` cut into blocks the way its kind is read (``kind`` must not be "auto": ``resolve`` first)."""
    blocks = _SPLITTERS[kind](text, source)
    if blocks.path is None and kind != "prose":
        return _with_path(blocks, code.path_in_header(text))
    return blocks


def _with_path(blocks: Blocks, path: str | None) -> Blocks:
    if path is None:
        return blocks
    from dataclasses import replace

    return replace(blocks, path=path)
