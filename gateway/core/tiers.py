"""What a request's long-context price tier was (``gateway.prices``), for its header and the counters.

A model whose prices have a tier reports, on every chat request, the tier the request as sent is billed
at (``billed=base``, or ``billed=above-272k``) and, when the gateway cut it to stay under a line, that
line (``kept-under=272000``). What keeping under it saved is priced in input tokens' worth at the base
price: the request as the client sent it, at its tier's multiple, less what was sent.
"""

from __future__ import annotations

from gateway.prices import Prices

HEADER = "x-mixpr-price-tier"


def billed(prices: Prices, tokens: int) -> str:
    """``base``, or ``above-<N>k`` for the tier a request of ``tokens`` input tokens is billed at."""
    tier = prices.tier(tokens)
    return "base" if tier is None else f"above-{tier.above // 1000}k"


def kept_under(line: int | None, original: int, final: int) -> int | None:
    """The line the request was kept under: the client's request would have passed it, what was sent
    does not."""
    if line is None or original <= line or final > line:
        return None
    return line


def report(prices: Prices, line: int | None, original: int, final: int) -> str | None:
    """The header's value; None for a model whose prices have no tier."""
    if not prices.tiers:
        return None
    under = kept_under(line, original, final)
    return f"billed={billed(prices, final)}" + (f"; kept-under={under}" if under is not None else "")


def saved(prices: Prices, line: int | None, original: int, final: int) -> float:
    """What keeping the request under ``line`` saved, in input tokens' worth at the base price (0 when
    it was not kept under one)."""
    if kept_under(line, original, final) is None:
        return 0.0
    tier = prices.tier(original)
    times = tier.times(prices) if tier is not None else 1.0
    return max(0.0, times * original - final)
