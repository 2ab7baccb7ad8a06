"""Content kinds: each cuts a tool output into the units its readers reuse (one module per kind).

``split(text, kind, source)`` gives ``lines.Blocks`` for one of ``KINDS``; "auto" asks ``detect``.
"""

from __future__ import annotations

from dataclasses import replace

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
    # Any kind may sit inside an editor's envelope that names the file ("[File: a/b.py ...]").
    path = code.path_in_header(text) if blocks.path is None and kind != "prose" else None
    return replace(blocks, path=path) if path else blocks
