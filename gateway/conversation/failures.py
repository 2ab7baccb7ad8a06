"""Forms whose job failed on its own, remembered for a while.

A piece whose form job raised, ran past ``compression_timeout_s`` or crashed its worker keeps its own
text. Were that not remembered, every later request of the conversation would run the job again
(another timeout, another killed worker) and, should it once succeed, send other bytes than before.
So a failure is remembered by the form's name for ``FAILED_TTL_S``, here and, through
``gateway.conversation.shared_forms``, by every replica; after that the job is tried again (a timeout
may have been a loaded machine's).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable

FAILED_TTL_S = 3600
MAX_ENTRIES = 65_536  # names of 40 hex digits: a few MB at most; the oldest go first


class Failures:
    """Names of failed forms, each until its deadline; read and written from builds' threads."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._until: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, names: Iterable[str], ttl_s: float = FAILED_TTL_S) -> None:
        until = time.monotonic() + ttl_s
        with self._lock:
            for name in names:
                self._until[name] = until
                self._until.move_to_end(name)
            while len(self._until) > self.max_entries:
                self._until.popitem(last=False)

    def known(self, names: Iterable[str]) -> set[str]:
        """Those of ``names`` that failed less than their TTL ago."""
        now = time.monotonic()
        with self._lock:
            found = set()
            for name in names:
                until = self._until.get(name)
                if until is None:
                    continue
                if until > now:
                    found.add(name)
                else:
                    del self._until[name]
            return found
