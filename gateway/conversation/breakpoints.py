"""Where a provider that caches only at explicit breakpoints (Anthropic) is told to cache."""

from __future__ import annotations

from typing import Any

from gateway.conversation import checks, warmth

BREAKPOINT = {"type": "ephemeral"}
# Anthropic refuses a 5-minute marker before a 1-hour one: before a client's hour, the gateway's
# marker is for the hour too (what it marks is written for the hour under the client's anyway).
HOUR_BREAKPOINT = {"type": "ephemeral", "ttl": "1h"}
MAX_BREAKPOINTS = 4  # Anthropic's limit per request


def with_breakpoint(sent: list[dict[str, Any]], previous: int, wanted: bool,
                    tools: Any = None) -> list[dict[str, Any]]:
    """A ``cache_control`` breakpoint on the last message of the previous request (what repeats), for
    providers that cache only at explicit breakpoints; never past ``MAX_BREAKPOINTS`` in all, the
    tools' own counted."""
    if not wanted or previous < 0 or checks.breakpoints(sent, tools) >= MAX_BREAKPOINTS:
        return sent
    out = list(sent)
    message = dict(out[previous])
    content = message.get("content")
    marker = HOUR_BREAKPOINT if warmth.asks_an_hour(sent[previous + 1:]) else BREAKPOINT
    if isinstance(content, str) and content:
        message["content"] = [{"type": "text", "text": content, "cache_control": marker}]
    elif isinstance(content, list) and content and isinstance(content[-1], dict):
        if "cache_control" in content[-1]:
            return sent
        message["content"] = [*content[:-1], {**content[-1], "cache_control": marker}]
    else:
        return sent
    out[previous] = message
    return out
