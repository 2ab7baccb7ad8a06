"""What a model charges per input token, per cached token read and per token written to the cache.

One place for prices, so every layer that weighs tokens against money (the shadow mode's saving,
the resets' trade of a cache write against reads) prices them the same way. The figures come from
the model's ``model_info`` in the config, else the model's own entry in LiteLLM's cost map (through
:func:`gateway.config.model_map`; ``LITELLM_LOCAL_MODEL_COST_MAP=True`` keeps that offline), else
documented defaults in relative units:

- input 1.0 per token;
- cache read 0.1 x input (Anthropic and OpenAI both bill cached reads at a tenth to a half of input);
- cache write 1.25 x input for Anthropic models (``anthropic/*`` or a ``claude`` name: a 5-minute
  cache write costs 1.25x), 1.0 x input otherwise (OpenAI-style automatic caching has no write premium).

A model whose entry has an input price but no cache price gets the same ratios times its own input
price. When the operator's ``model_info`` sets an input price and no cache price, the cache prices keep
the ratios LiteLLM's list has between its own (e.g. Claude Sonnet 4.5: reads 0.1x, writes 1.25x), now
of the operator's input price: a contract's discount applies to cached tokens too, and the list's
absolute cache prices beside a lower input price would make a cache read dearer than it is relative to
input (and a reset worth more than it is). Cache prices the operator sets stand as set.
``source`` says whether the input price is the model's own ("litellm") or the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gateway.config import ModelEntry, model_map

DEFAULT_INPUT = 1.0
DEFAULT_READ_RATIO = 0.1
ANTHROPIC_WRITE_RATIO = 1.25
PLAIN_WRITE_RATIO = 1.0
PRICE_KEYS = ("input_cost_per_token", "cache_read_input_token_cost", "cache_creation_input_token_cost")


@dataclass(frozen=True)
class Prices:
    input: float  # per input token
    cache_read: float  # per cached token read
    cache_write: float  # per token written to the cache (Anthropic-style 1.25x input; OpenAI: = input)
    source: str  # "litellm" (the model's own entry in LiteLLM's cost map, or model_info) or "default"


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
    return _prices(model, *overrides)


@lru_cache(maxsize=1024)
def _prices(model: str, input_: float | None, read: float | None, write: float | None) -> Prices:
    entry = model_map(model, own_entry=True) if None in (input_, read, write) else {}
    listed = _price(entry, PRICE_KEYS[0])
    input_ = input_ if input_ is not None else listed
    source = "litellm" if input_ is not None else "default"
    if input_ is None:
        input_ = DEFAULT_INPUT
    if read is None:
        read = _cache(entry, PRICE_KEYS[1], listed, input_, DEFAULT_READ_RATIO)
    if write is None:
        write = _cache(entry, PRICE_KEYS[2], listed, input_, _write_ratio(model))
    return Prices(input=input_, cache_read=read, cache_write=write, source=source)


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
    name = model.lower()
    anthropic = name.startswith("anthropic/") or "claude" in name
    return ANTHROPIC_WRITE_RATIO if anthropic else PLAIN_WRITE_RATIO


def _price(values: Mapping[str, Any] | None, key: str) -> float | None:
    value = (values or {}).get(key)
    # bool is an int: never a price. A negative price is a typo, not a rebate.
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)
