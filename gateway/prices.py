"""What a model charges per input token, per cached token read and per token written to the cache.

One place for prices, so every layer that weighs tokens against money (the shadow mode's saving,
the resets' trade of a cache write against reads) prices them the same way. The figures come from
the model's ``model_info`` in the config, else the model's own entry in LiteLLM's cost map (through
:func:`gateway.config.model_map`; ``LITELLM_LOCAL_MODEL_COST_MAP=True`` keeps that offline), else
documented defaults in relative units:

- input 1.0 per token;
- cache read 0.1 x input (Anthropic and OpenAI both bill cached reads at a tenth to a half of input);
- cache write 1.25 x input for Anthropic models (``anthropic/*`` or a ``claude`` name: a 5-minute
  cache write costs 1.25x), 1.0 x input otherwise (OpenAI-style automatic caching has no write premium);
- a 1-hour cache write (``cache_control: {"ttl": "1h"}``; LiteLLM's
  ``cache_creation_input_token_cost_above_1hr``) 2 x input for Anthropic models, the write price
  otherwise (no other provider sells an hour). Only a request that asks for the hour pays it
  (:meth:`Prices.for_an_hour`); ``_above_1hr`` is a lifetime, not a price tier.

A model whose entry has an input price but no cache price gets the same ratios times its own input
price. When the operator's ``model_info`` sets an input price and no cache price, the cache prices keep
the ratios LiteLLM's list has between its own (e.g. Claude Sonnet 4.5: reads 0.1x, writes 1.25x), now
of the operator's input price: a contract's discount applies to cached tokens too, and the list's
absolute cache prices beside a lower input price would make a cache read dearer than it is relative to
input (and a reset worth more than it is). Cache prices the operator sets stand as set.
``source`` says whether the input price is the model's own ("litellm") or the default.

**Long-context tiers** (issue 56). Many models bill every token of a request at a higher price once its
input passes a line: GPT-5.4+ 2x past 272k, Gemini 2.5 Pro and Claude's 1M models 2x past 200k, Claude
Haiku 5.5 5x past 100k. LiteLLM's map names them ``input_cost_per_token_above_<N>k_tokens``, with
``output_cost_per_token_``, ``cache_read_input_token_cost_`` and ``cache_creation_input_token_cost_`` of
the same line. They are read here too, the config's ``model_info`` key by key before LiteLLM's map, into
``Prices.tiers``: a tier whose cache prices are missing keeps the base prices' ratios to input, scaled
by its own input price. A tier that costs no more than the prices below it is no tier.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from gateway.config import ModelEntry, model_map

DEFAULT_INPUT = 1.0
DEFAULT_READ_RATIO = 0.1
ANTHROPIC_WRITE_RATIO = 1.25
ANTHROPIC_HOUR_WRITE_RATIO = 2.0  # Anthropic's 1-hour cache write, where the map has no price for it
PLAIN_WRITE_RATIO = 1.0
PRICE_KEYS = ("input_cost_per_token", "cache_read_input_token_cost", "cache_creation_input_token_cost")
OUTPUT_KEY = "output_cost_per_token"
HOUR_KEY = "cache_creation_input_token_cost_above_1hr"  # a write that the cache keeps an hour
# ``input_cost_per_token_above_272k_tokens``; not ``..._tokens_batches`` or ``..._above_1hr_above_...``.
_TIER_KEY = re.compile(r"(?P<key>input_cost_per_token|output_cost_per_token|cache_read_input_token_cost|"
                       r"cache_creation_input_token_cost)_above_(?P<k>[1-9][0-9]{0,5})k_tokens")
# The 1-hour write past a tier's line: ``cache_creation_input_token_cost_above_1hr_above_200k_tokens``.
_HOUR_TIER_KEY = re.compile(HOUR_KEY + r"_above_(?P<k>[1-9][0-9]{0,5})k_tokens")


@dataclass(frozen=True)
class Tier:
    """The prices of every token of a request whose input passes ``above`` tokens."""

    above: int  # tokens (LiteLLM's ``_above_272k_`` is 272,000)
    input: float
    cache_read: float
    cache_write: float
    output: float | None = None  # None: the output price does not change
    cache_write_hour: float | None = None  # a 1-hour cache write (None: as ``cache_write``)

    def times(self, base: Prices) -> float:
        """How many times the input price below the line this tier bills (1.0 for a base priced 0)."""
        return self.input / base.input if base.input > 0 else 1.0


@dataclass(frozen=True)
class Prices:
    input: float  # per input token
    cache_read: float  # per cached token read
    cache_write: float  # per token written to the cache (Anthropic-style 1.25x input; OpenAI: = input)
    source: str  # "litellm" (the model's own entry in LiteLLM's cost map, or model_info) or "default"
    tiers: tuple[Tier, ...] = ()  # long-context tiers, lowest line first, each dearer than below it
    output: float | None = None  # per output token, when known
    cache_write_hour: float | None = None  # per token written to the cache for an hour (None: as cache_write)

    def for_an_hour(self) -> Prices:
        """These prices as a request that asks the cache to keep its prefix an hour pays them: every
        token it writes to the cache, below a tier's line or past it, at the 1-hour write price."""
        tiers = tuple(replace(t, cache_write=_or(t.cache_write_hour, t.cache_write)) for t in self.tiers)
        return replace(self, cache_write=_or(self.cache_write_hour, self.cache_write), tiers=tiers)

    def tier(self, tokens: int) -> Tier | None:
        """The tier a request of ``tokens`` input tokens is billed at (None: the base prices)."""
        billed = None
        for tier in self.tiers:
            if tokens > tier.above:
                billed = tier
        return billed

    def at(self, tokens: int) -> Prices:
        """The prices a request of ``tokens`` input tokens pays: its tier's, else these."""
        tier = self.tier(tokens)
        if tier is None:
            return self
        output = tier.output if tier.output is not None else self.output
        return Prices(tier.input, tier.cache_read, tier.cache_write, self.source, (), output,
                      tier.cache_write_hour)

    def line(self, window: int) -> int | None:
        """The lowest tier line under ``window`` tokens: what a request that fits is kept under."""
        return next((tier.above for tier in self.tiers if tier.above < window), None)


def entry_prices(entry: ModelEntry) -> Prices:
    """The prices of a ``model_list`` entry: its ``model_info``'s, else LiteLLM's cost map's for its
    upstream model, else the defaults. Resolved once per model by the preparer
    (``gateway.core.prepare``) and carried by its ``Target``, so the reset gate, observe mode and the
    reports weigh tokens at the same prices."""
    return prices_for(entry.upstream_model, entry.model_info.model_dump())


def prices_for(model: str, model_info: Mapping[str, Any] | None = None) -> Prices:
    """The prices of the upstream ``model`` (``litellm_params.model``); ``model_info`` (the config's)
    overrides LiteLLM's cost map key by key. Cached by model and overrides."""
    overrides = tuple(_price(model_info, key) for key in PRICE_KEYS) if model_info else (None, None, None)
    tiered = tuple(sorted((k, v) for k, v in (model_info or {}).items()
                          if _TIER_KEY.fullmatch(k) or _HOUR_TIER_KEY.fullmatch(k) or k == OUTPUT_KEY))
    return _prices(model, *overrides, tiered, _price(model_info, HOUR_KEY))


@lru_cache(maxsize=1024)
def _prices(model: str, input_: float | None, read: float | None, write: float | None,
            tiered: tuple[tuple[str, Any], ...] = (), hour: float | None = None) -> Prices:
    entry = model_map(model, own_entry=True)
    listed = _price(entry, PRICE_KEYS[0])
    input_ = input_ if input_ is not None else listed
    source = "litellm" if input_ is not None else "default"
    if input_ is None:
        input_ = DEFAULT_INPUT
    if read is None:
        read = _cache(entry, PRICE_KEYS[1], listed, input_, DEFAULT_READ_RATIO)
    if write is None:
        write = _cache(entry, PRICE_KEYS[2], listed, input_, _write_ratio(model))
    if hour is None:
        hour = _cache(entry, HOUR_KEY, listed, input_, _hour_ratio(model)) if _is_anthropic(model) else write
    base = Prices(input=input_, cache_read=read, cache_write=write, source=source, cache_write_hour=hour)
    merged = {**entry, **dict(tiered)}  # the config's model_info key by key before LiteLLM's map
    output = _price(merged, OUTPUT_KEY)
    return Prices(input_, read, write, source, _tiers(merged, base, output), output, hour)


def _tiers(values: Mapping[str, Any], base: Prices, output: float | None) -> tuple[Tier, ...]:
    """Every tier in ``values`` with an input price, lowest line first; a tier no dearer than the
    prices below it is left out (it would never pay to stay under)."""
    lines: dict[int, dict[str, float | None]] = {}
    for key in values:
        found = _TIER_KEY.fullmatch(key)
        if found is not None:
            lines.setdefault(int(found["k"]) * 1000, {})[found["key"]] = _price(values, key)
        found = _HOUR_TIER_KEY.fullmatch(key)
        if found is not None:
            lines.setdefault(int(found["k"]) * 1000, {})[HOUR_KEY] = _price(values, key)
    tiers, below = [], base
    for above in sorted(lines):
        tier = _tier(above, lines[above], base)
        if tier is not None and _dearer(tier, below, output):
            tiers.append(tier)
            below = Prices(tier.input, tier.cache_read, tier.cache_write, base.source)
            output = tier.output if tier.output is not None else output
    return tuple(tiers)


def _tier(above: int, prices: Mapping[str, float | None], base: Prices) -> Tier | None:
    input_ = prices.get(PRICE_KEYS[0])
    if input_ is None:
        return None
    ratio = input_ / base.input if base.input > 0 else 1.0
    read = prices.get(PRICE_KEYS[1])
    write = prices.get(PRICE_KEYS[2])
    hour = prices.get(HOUR_KEY)
    base_hour = _or(base.cache_write_hour, base.cache_write)
    return Tier(above, input_, base.cache_read * ratio if read is None else read,
                base.cache_write * ratio if write is None else write, prices.get(OUTPUT_KEY),
                base_hour * ratio if hour is None else hour)


def _dearer(tier: Tier, below: Prices, output: float | None) -> bool:
    more_output = tier.output is not None and output is not None and tier.output > output
    return tier.input > below.input or tier.cache_read > below.cache_read or more_output


def _cache(entry: Mapping[str, Any], key: str, listed: float | None, input_: float, default: float) -> float:
    """The cache price ``key`` for the input price in force: the list's own when that is the list's
    input price (or the list has none to scale by), else the list's ratio to its input price times
    it; ``default`` times it when the list has no such price."""
    price = _price(entry, key)
    if price is None:
        return default * input_
    if not listed or input_ == listed:
        return price
    return price / listed * input_


def _write_ratio(model: str) -> float:
    return ANTHROPIC_WRITE_RATIO if _is_anthropic(model) else PLAIN_WRITE_RATIO


def _hour_ratio(model: str) -> float:
    """A 1-hour write over input, where the map has no price for it: Anthropic's 2x."""
    return ANTHROPIC_HOUR_WRITE_RATIO if _is_anthropic(model) else PLAIN_WRITE_RATIO


def _is_anthropic(model: str) -> bool:
    name = model.lower()
    return name.startswith("anthropic/") or "claude" in name


def _or(price: float | None, otherwise: float) -> float:
    return otherwise if price is None else price


def _price(values: Mapping[str, Any] | None, key: str) -> float | None:
    value = (values or {}).get(key)
    # bool is an int: never a price. A negative price is a typo, not a rebate.
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)
