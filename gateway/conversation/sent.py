"""What this instance sent before, per conversation: digests of the messages it forwarded, so a
follow-up's report says honestly how much of its prompt repeats the previous request byte for byte.

A conversation is named by a hash of its messages up to a point (``chain``), and what was sent for it
by one digest per message (``digest``); ``common`` is how many leading messages two requests share.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

REMEMBERED_BYTES = 8 * 1024 * 1024  # what this instance sent per conversation, for honest reports


class Sent:
    """Per conversation (a hash of its messages), digests of the messages this instance sent."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._sent: OrderedDict[str, list[str]] = OrderedDict()
        self._lock = threading.Lock()  # builds of several requests run in threads at once

    def get(self, name: str) -> list[str] | None:
        with self._lock:
            return self._sent.get(name)

    def put(self, name: str, digests: list[str]) -> None:
        with self._lock:
            self._put(name, digests)

    def _put(self, name: str, digests: list[str]) -> None:
        if name in self._sent:
            self.used -= 48 * len(self._sent.pop(name))
        self._sent[name] = digests
        self.used += 48 * len(digests)
        while self.used > self.max_bytes and self._sent:
            _, old = self._sent.popitem(last=False)
            self.used -= 48 * len(old)


# A long string is escaped this many characters at a time: ``json.dumps`` of a whole 8 MB message
# holds the GIL ~60 ms in one C call, during which a build's thread stalls the event loop.
CHUNK_CHARS = 65_536


def digest(message: dict[str, Any]) -> str:
    out = hashlib.blake2b(digest_size=16)
    for piece in canonical(message):
        out.update(piece.encode())
    return out.hexdigest()


def chain(messages: Sequence[dict[str, Any]], model_name: str) -> list[str]:
    """A hash of every prefix ``messages[: i + 1]`` (and the model), in one pass."""
    running = hashlib.blake2b(model_name.encode(), digest_size=16)
    out = []
    for message in messages:
        for piece in canonical(message):
            running.update(piece.encode())
        out.append(running.copy().hexdigest())
    return out


def canonical(value: Any) -> Iterator[str]:
    """``json.dumps(value, sort_keys=True)`` in pieces, no piece much longer than ``CHUNK_CHARS``
    (a string's escapes do not depend on its neighbours, so its slices are escaped one by one)."""
    if isinstance(value, str):
        if len(value) <= CHUNK_CHARS:
            yield json.dumps(value)
            return
        yield '"'
        for start in range(0, len(value), CHUNK_CHARS):
            yield json.dumps(value[start:start + CHUNK_CHARS])[1:-1]
        yield '"'
    elif isinstance(value, dict) and all(isinstance(key, str) for key in value):
        yield "{"
        for number, key in enumerate(sorted(value)):
            yield f"{', ' if number else ''}{json.dumps(key)}: "
            yield from canonical(value[key])
        yield "}"
    elif isinstance(value, list | tuple):
        yield "["
        for number, item in enumerate(value):
            if number:
                yield ", "
            yield from canonical(item)
        yield "]"
    else:
        yield json.dumps(value, sort_keys=True)


def common(a: Sequence[str], b: Sequence[str]) -> int:
    """How many leading items ``a`` and ``b`` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
