"""When each conversation's prefix was last sent, and so whether the provider's cache still holds it.

A provider keeps a prompt's prefix cached for minutes: Anthropic 5 (an hour when the client asks,
``cache_control: {"ttl": "1h"}``), OpenAI 5 to 10 in memory (24 hours with ``prompt_cache_retention:
"24h"``). Past that, the next request writes its whole prefix again, at full or write price, whatever
the gateway sends: a reset then costs no extra write, and every token it removes saves its full
price. Only a gateway sees the pause, so it remembers, per conversation, when it last sent its prefix
and the turns where a cold cache reset it (:class:`Visit`), so that every later request's scan resets
there too and what is sent stays a function of the conversation and this memory.

A conversation is named by the hash of the messages its request sent (``sent.chain``): a request looks
up the name of its previous request's messages and leaves its own. Kept in this instance's memory and,
when the form cache's Redis is configured, there too (signed like forms), so replicas agree. A
conversation not found (evicted, or a replica without Redis) is neither warm nor cold: nothing is reset
for a pause nobody saw, and the cold points found before are forgotten, which costs one cache write
where they would have been reproduced.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.conversation.shared_forms import FormStore

ANTHROPIC_S = 300.0  # Anthropic's default cache: 5 minutes from the last use
ANTHROPIC_LONG_S = 3600.0  # cache_control ttl "1h" (written at 2x input)
# OpenAI keeps a prefix 5 to 10 minutes in memory: cold is certain only past the longer, and a turn
# called cold while the cache is warm would pay a whole rewrite.
OPENAI_S = 600.0
RETENTION_S = {"24h": 86400.0, "in_memory": OPENAI_S}  # OpenAI's prompt_cache_retention
REMEMBERED = 50_000  # requests remembered in this instance's memory (about 14 MB, measured)
NAME = "warmth:"  # before the conversation's hash in Redis (forms' names are plain hashes)


@dataclass(frozen=True)
class Visit:
    """What is remembered of a conversation: when its prefix was last sent (seconds since the epoch:
    replicas compare it), and the message indices where a cold cache reset it."""

    at: float
    cold: tuple[int, ...] = ()

    def encoded(self) -> bytes:
        return json.dumps({"at": self.at, "cold": list(self.cold)}).encode()

    @staticmethod
    def decoded(value: bytes) -> Visit | None:
        try:
            data = json.loads(value)
            return Visit(float(data["at"]), tuple(int(i) for i in data["cold"]))
        except (ValueError, TypeError, KeyError):
            return None


def lifetime(model: str, configured: float | None, params: Mapping[str, Any], *, hour: bool) -> float | None:
    """How long ``model``'s provider keeps this request's prefix: ``configured`` (the model's
    ``prefix.cache_lifetime_s``) else the provider's default, lengthened by what the client asks
    (``hour``: an hour-long ``cache_control``, see :func:`asks_an_hour`; OpenAI's
    ``prompt_cache_retention``). None: no known lifetime (a local server's cache has none), never cold."""
    name = model.lower()
    if "claude" in name or name.startswith("anthropic/"):
        base = ANTHROPIC_S if configured is None else configured
        return max(base, ANTHROPIC_LONG_S) if hour else base
    retention = RETENTION_S.get(str(params.get("prompt_cache_retention")))
    if name.startswith(("openai/", "azure/", "gpt-", "o1", "o3", "o4")) or retention is not None:
        base = OPENAI_S if configured is None else configured
        return max(base, retention) if retention is not None else base
    return configured


def asks_an_hour(*items: Any) -> bool:
    """Whether any ``cache_control`` among ``items`` has ttl "1h": messages, blocks, tools or lists of
    them, and the blocks inside their ``content`` (a tool result's own). Read on the client's own
    request: a view of it (Anthropic's, for compression) may not show where the client put it."""
    todo = list(items)
    while todo:  # a loop, not recursion: a client's nesting has no depth limit
        item = todo.pop()
        if isinstance(item, list):
            todo += item
        elif isinstance(item, Mapping):
            if _hour(item):
                return True
            if isinstance(item.get("content"), list):
                todo += item["content"]
    return False


def _hour(item: Mapping[str, Any]) -> bool:
    control = item.get("cache_control")
    return isinstance(control, Mapping) and control.get("ttl") == "1h"


class Warmth:
    """Per conversation, its last :class:`Visit`: in this instance's memory, then the replicas' Redis
    (through the form store). Its methods run in a build's thread."""

    def __init__(self, store: FormStore, remembered: int = REMEMBERED) -> None:
        self.store = store
        self.remembered = remembered
        self._visits: OrderedDict[str, Visit] = OrderedDict()
        self._lock = threading.Lock()  # builds of several requests run in threads at once

    def last(self, name: str, loop: asyncio.AbstractEventLoop | None) -> Visit | None:
        """The conversation ``name``'s last visit, if this instance or (asked once) Redis knows it."""
        with self._lock:
            visit = self._visits.get(name)
        if visit is not None:
            return visit
        stored = self.store.values([NAME + name], loop).get(NAME + name)
        return Visit.decoded(stored) if stored is not None else None

    def keep(self, name: str, visit: Visit, loop: asyncio.AbstractEventLoop | None) -> None:
        """Remember ``visit`` of the conversation ``name``, here and (without waiting) in Redis."""
        with self._lock:
            self._visits[name] = visit
            self._visits.move_to_end(name)
            while len(self._visits) > self.remembered:
                self._visits.popitem(last=False)
        self.store.keep_values({NAME + name: visit.encoded()}, loop)


def cold(visit: Visit | None, lifetime_s: float | None, now: float | None = None) -> bool | None:
    """Whether the cache is cold now: the prefix was last sent longer than ``lifetime_s`` ago. None
    when that is unknown (no visit remembered, or no lifetime)."""
    if visit is None or lifetime_s is None:
        return None
    return (time.time() if now is None else now) - visit.at > lifetime_s


def points(visit: Visit | None, here: int | None) -> frozenset[int]:
    """The cold points a scan resets at: those remembered, and ``here`` (this request's, when cold)."""
    found: Iterable[int] = visit.cold if visit is not None else ()
    return frozenset([*found, *([here] if here is not None else [])])
