"""The auto router's decisions, remembered by content: one router call per distinct prompt.

Keys are a hash of the router model's name and the text. An identical request that arrives while
the first one is still asking waits for that answer instead of asking the router model again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import threading
from collections.abc import Iterator

INLINE_HASH_CHARS = 200_000  # shorter texts are hashed on the loop: a thread hop costs more


class RouteCache:
    def __init__(self, size: int) -> None:
        self._decisions = _LruCache(size)
        # Decisions being made right now, by key; resolved when the asking request is done.
        self._deciding: dict[str, asyncio.Future[None]] = {}

    async def key(self, router_name: str, text: str) -> str:
        # hashlib releases the GIL on large inputs, but encoding 4 MB does not: off the loop if big.
        if len(text) < INLINE_HASH_CHARS:
            return route_key(router_name, text)
        return await asyncio.get_running_loop().run_in_executor(None, route_key, router_name, text)

    async def decided(self, key: str) -> str | None:
        """The cached route for ``key``, after waiting for an identical request that is asking now."""
        pending = self._deciding.get(key)
        if pending is not None:
            await asyncio.shield(pending)
        return self._decisions.get(key)

    @contextlib.contextmanager
    def asking(self, key: str | None) -> Iterator[None]:
        """Mark ``key`` as being decided for the duration; only the first request per key asks.

        No await may sit between ``decided`` and entering this block: that is what makes the
        check-and-register atomic on the event loop.
        """
        mine = key is not None and key not in self._deciding
        if mine:
            self._deciding[key] = asyncio.get_running_loop().create_future()
        try:
            yield
        finally:
            if mine:
                self._deciding.pop(key).set_result(None)

    def put(self, key: str, route: str) -> None:
        self._decisions.put(key, route)


def route_key(name: str, text: str) -> str:
    return hashlib.sha256(name.encode() + b"\0" + text.encode("utf-8", "surrogatepass")).hexdigest()


class _LruCache:
    """A tiny thread-safe LRU map."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
            return self._data.get(key)

    def put(self, key: str, value: str) -> None:
        if self._size <= 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)
