"""What a provider's prompt cache reads of each request of one replayed agent run, and its price under
several price lists (issue #46).

The replay is done once; everything here is arithmetic on what the upstream received. Per request, the
tokens a cache reads (``Cached``): OpenAI-style, the longest prefix shared with an earlier request, from
1,024 tokens in 128-token steps; Anthropic-style, a breakpoint at the end of each request: the longest
earlier request that is a prefix of this one is read, the rest written (nothing is cached under 1,024
tokens). These are ``bench.conversation.priced``'s rules, computed faster: two requests are compared
message by message first (a message's tokens are one shared array, ``bench.agents.Tokens``), and as
arrays only from the first message that differs, so a run costs about its length, not its length
times every earlier request's. A price list (``PriceList``) then prices those counts; the default list
(reads 0.1x, writes 1.25x) gives ``priced``'s figures exactly.

A cold cache (a pause past the provider's cache lifetime, ``fresh``): from that request on, nothing
sent before it is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_CACHED, STEP = 1024, 128  # as bench.conversation: a provider caches from 1,024 tokens, in steps
BLOCK = 4096  # tokens compared at a time past the shared messages: most requests differ early


@dataclass(frozen=True)
class PriceList:
    """Cache prices relative to the input price: a cached read, and a token written to the cache
    (Anthropic-style; OpenAI-style caching has no write premium: what is not read costs 1.0)."""

    read: float
    write: float


PRICE_LISTS = {
    "default": PriceList(0.1, 1.25),  # the table's own columns
    "read 0.05": PriceList(0.05, 1.25),
    "read 0.025": PriceList(0.025, 1.25),
    "1h writes": PriceList(0.1, 2.0),  # Anthropic's 1-hour cache: writes at twice the input price
}


@dataclass(frozen=True)
class Request:
    """One request's tokens, and the arrays of its messages (whose concatenation ``tokens`` is)."""

    tokens: np.ndarray
    parts: Sequence[np.ndarray]


@dataclass(frozen=True)
class Cached:
    tokens: int
    openai_read: int
    anthropic_read: int

    @property
    def anthropic_written(self) -> int:
        return self.tokens - self.anthropic_read if self.tokens >= MIN_CACHED else 0

    def openai(self, prices: PriceList) -> float:
        return self.tokens - self.openai_read + prices.read * self.openai_read

    def anthropic(self, prices: PriceList) -> float:
        n = self.tokens
        return prices.read * self.anthropic_read + prices.write * self.anthropic_written + (
            n if n < MIN_CACHED else 0)


def cached(requests: Sequence[Request], fresh: Sequence[bool] | None = None) -> list[Cached]:
    """Per request, what each caching rule reads; ``fresh[i]``: the cache was empty before request
    ``i`` (it reads nothing sent earlier)."""
    out = []
    start = 0  # the first request sent into the cache as it is now
    for i, request in enumerate(requests):
        if fresh is not None and fresh[i]:
            start = i
        longest, whole = 0, 0
        n = len(request.tokens)
        for earlier in requests[start:i]:
            shared = shared_prefix(request, earlier)
            longest = max(longest, shared)
            m = len(earlier.tokens)
            if m >= MIN_CACHED and shared == m:
                whole = max(whole, m)
        openai_read = (longest // STEP) * STEP if longest >= MIN_CACHED else 0
        out.append(Cached(n, openai_read, whole))
    return out


def shared_prefix(a: Request, b: Request) -> int:
    """How many leading tokens ``a`` and ``b`` share: the messages they share (the same array), then
    the arrays compared a block at a time from there."""
    at = 0
    for x, y in zip(a.parts, b.parts, strict=False):
        if x is not y:
            break
        at += len(x)
    rest_a, rest_b = a.tokens[at:], b.tokens[at:]
    n = min(len(rest_a), len(rest_b))
    for block in range(0, n, BLOCK):
        end = min(n, block + BLOCK)
        differ = np.flatnonzero(rest_a[block:end] != rest_b[block:end])
        if len(differ):
            return at + block + int(differ[0])
    return at + n
