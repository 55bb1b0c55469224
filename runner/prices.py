"""What a model call costs: USD per million tokens, looked up by model-name glob.

The plan's ``prices`` (model glob -> Price) are consulted first, then ``DEFAULT_PRICES``
in order, so put specific globs before general ones. A model that matches nothing is
priced at ``UNKNOWN_MODEL_PRICE``, the most expensive entry, so that a cost ceiling
(``abort: cost_usd_above``) trips early rather than late. List prices, November 2026.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from mitmchaos.globs import first_match
from mitmchaos.plan import Price

DEFAULT_PRICES: dict[str, Price] = {
    # Anthropic (cache reads 0.1x input, 5-minute cache writes 1.25x input: the Price defaults)
    "claude-opus-4-0*": Price(input=15, output=75),
    "claude-opus-4-1*": Price(input=15, output=75),
    "claude-opus-4-2025*": Price(input=15, output=75),
    "claude-opus-4*": Price(input=5, output=25),
    "claude-3-opus*": Price(input=15, output=75),
    "claude-sonnet-4*": Price(input=3, output=15),
    "claude-3-7-sonnet*": Price(input=3, output=15),
    "claude-3-5-sonnet*": Price(input=3, output=15),
    "claude-haiku-4*": Price(input=1, output=5),
    "claude-3-5-haiku*": Price(input=0.8, output=4),
    "claude-3-haiku*": Price(input=0.25, output=1.25),
    # OpenAI (cached input is billed at the cache_read price; there is no cache-write charge)
    "gpt-5*-nano*": Price(input=0.05, output=0.4, cache_read=0.005, cache_write=0.05),
    "gpt-5*-mini*": Price(input=0.25, output=2, cache_read=0.025, cache_write=0.25),
    "gpt-5*": Price(input=1.25, output=10, cache_read=0.125, cache_write=1.25),
    "gpt-4.1-nano*": Price(input=0.1, output=0.4, cache_read=0.025, cache_write=0.1),
    "gpt-4.1-mini*": Price(input=0.4, output=1.6, cache_read=0.1, cache_write=0.4),
    "gpt-4.1*": Price(input=2, output=8, cache_read=0.5, cache_write=2),
    "gpt-4o-mini*": Price(input=0.15, output=0.6, cache_read=0.075, cache_write=0.15),
    "gpt-4o*": Price(input=2.5, output=10, cache_read=1.25, cache_write=2.5),
    "o4-mini*": Price(input=1.1, output=4.4, cache_read=0.275, cache_write=1.1),
    "o3-mini*": Price(input=1.1, output=4.4, cache_read=0.55, cache_write=1.1),
    "o3*": Price(input=2, output=8, cache_read=0.5, cache_write=2),
    "o1*": Price(input=15, output=60, cache_read=7.5, cache_write=15),
}

UNKNOWN_MODEL_PRICE = Price(input=15, output=75)


def price_for(model: str | None, overrides: Mapping[str, Price] | None = None) -> Price:
    pattern = first_match(overrides or (), model)
    return overrides[pattern] if pattern is not None else _default_price(model)


@lru_cache(maxsize=1024)  # the proxy prices every model call; the models are few
def _default_price(model: str | None) -> Price:
    pattern = first_match(DEFAULT_PRICES, model)
    return DEFAULT_PRICES[pattern] if pattern is not None else UNKNOWN_MODEL_PRICE


def cost_usd(
    model: str | None, usage: Mapping[str, int | None], overrides: Mapping[str, Price] | None = None
) -> float:
    """Cost of one call from llm_call usage fields (input_tokens excludes cache reads and writes)."""
    price = price_for(model, overrides)
    cache_read = price.cache_read if price.cache_read is not None else price.input / 10
    cache_write = price.cache_write if price.cache_write is not None else price.input * 1.25
    per_million = (
        (usage.get("input_tokens") or 0) * price.input
        + (usage.get("output_tokens") or 0) * price.output
        + (usage.get("cache_read_tokens") or 0) * cache_read
        + (usage.get("cache_write_tokens") or 0) * cache_write
    )
    return round(per_million / 1_000_000, 8)
