"""Jobs that look inside a compression worker. Run there by name, so this module imports nothing that
the worker has not loaded already (a test module's own imports would add their objects)."""

from __future__ import annotations

import gc


def tracked_objects() -> int:
    """Objects a full collection would walk in this process (the frozen ones are not)."""
    return sum(len(gc.get_objects(generation)) for generation in range(3))
