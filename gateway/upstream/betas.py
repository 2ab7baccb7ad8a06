"""Which ``anthropic-beta`` flags a client may turn on for the operator's Anthropic account.

A beta flag can change what a request costs (``context-1m-...`` bills long prompts at another rate)
or let the model run server-side tools on the operator's account (``code-execution-...``,
``mcp-client-...``). So the relay forwards only the flags of ``general_settings.anthropic_betas``
(by default ``gateway.config.ANTHROPIC_BETAS``) and drops the rest, logging each dropped name once
(a client could send any number of made-up names: the set of names already logged is bounded).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger("gateway.upstream.betas")

ANY = "*"  # in the allow-list: forward every flag as sent
MAX_LOGGED = 256  # distinct dropped names logged; past it, dropping goes on silently
MAX_NAME_CHARS = 80


class Betas:
    """The allow-list, and the dropped names already logged."""

    def __init__(self, allowed: Iterable[str]) -> None:
        self.allowed = frozenset(allowed)
        self._logged: set[str] = set()

    def header(self, value: str | None) -> str | None:
        """The client's ``anthropic-beta`` value with only allowed flags (None when none is left)."""
        if not value or ANY in self.allowed:
            return value or None
        flags = [flag.strip() for flag in value.split(",") if flag.strip()]
        for flag in flags:
            if flag not in self.allowed:
                self._dropped(flag)
        kept = [flag for flag in flags if flag in self.allowed]
        return ",".join(kept) or None

    def _dropped(self, flag: str) -> None:
        name = flag[:MAX_NAME_CHARS]
        if name in self._logged or len(self._logged) >= MAX_LOGGED:
            return
        self._logged.add(name)
        log.warning("anthropic-beta %r is not in general_settings.anthropic_betas: dropped (logged once)",
                    name)
