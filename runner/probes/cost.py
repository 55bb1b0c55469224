"""What model calls cost: the proxy's figure, or the plan's per-million-token prices by model glob."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mitmchaos.globs import first_match

if TYPE_CHECKING:
    from mitmchaos.probes.evidence import LlmCall


def call_cost(call: LlmCall, prices: dict[str, Any]) -> float | None:
    """USD for one call from per-million-token prices by model glob; None when no price matches."""
    pattern = first_match(prices, call.model)
    if pattern is None:
        return None
    price = prices[pattern]
    cache_read = getattr(price, "cache_read", None)
    cache_write = getattr(price, "cache_write", None)
    return (call.input_tokens * price.input + call.output_tokens * price.output
            + call.cache_read_tokens * (price.input / 10 if cache_read is None else cache_read)
            + call.cache_write_tokens * (price.input * 1.25 if cache_write is None else cache_write)) / 1e6


def repetition_cost(calls: list[LlmCall], plan_prices: dict[str, Any],
                    override: dict[str, Any] | None = None) -> tuple[float, list[str]]:
    """Summed cost and the models nothing priced. ``override`` prices win over the proxy's
    ``cost_usd``, which wins over the plan's prices."""
    total, unpriced = 0.0, []
    for call in calls:
        cost = call_cost(call, override) if override else None
        if cost is None:
            cost = call.cost_usd
        if cost is None:
            cost = call_cost(call, plan_prices)
        if cost is None:
            unpriced.append(call.model or "?")
        else:
            total += cost
    return total, sorted(set(unpriced))
