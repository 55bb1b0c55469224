"""tool.*: faults on tool calls, on MCP traffic and on the agent's built-in tools at the model API."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

from mitmchaos.addons.faults import FaultOptions, FaultType, register
from pydantic import Field


class ToolErrorOptions(FaultOptions):
    message: str | None = Field(None, description="the error text (the canary is always added)")
    error_kind: Literal["execution", "timeout", "network", "validation"] = Field(
        "execution", description="what kind of failure the message describes"
    )
    mcp_error: Literal["result", "jsonrpc"] = Field(
        "result", description="MCP: an isError tool result, or a JSON-RPC error"
    )


class StaleDataOptions(FaultOptions):
    result: str | dict[str, Any] | list[Any] = Field(
        "(cached result from 2023-01-01; the data may be out of date)",
        description="the fixed, out-of-date result returned instead",
    )


class CorruptOptions(FaultOptions):
    variant: Literal[
        "empty_result",
        "missing_fields",
        "null_fields",
        "unexpected_nesting",
        "truncated_result",
        "corrupt_values",
    ] = Field("corrupt_values", description="how the result is damaged")
    ratio: float = Field(0.5, ge=0, le=1, description="share of fields hit (missing, null, corrupt variants)")
    max_length: int = Field(20, ge=0, le=1_000_000, description="truncated_result: keep this many characters")


class ToolLatencyOptions(FaultOptions):
    delay_s: float = Field(
        1.0, ge=0, le=5, description="delay before the tool result (the mean, for a distribution)"
    )
    jitter_s: float = Field(0.0, ge=0, le=5, description="spread of the distribution")
    distribution: Literal["fixed", "uniform", "normal", "pareto"] = Field("fixed", description="seeded draw")


register(
    FaultType(
        "tool.error", ToolErrorOptions, ("mcp", "proxy"), "fail-safe", "the tool call fails with a message"
    )
)
register(
    FaultType(
        "tool.stale_data",
        StaleDataOptions,
        ("mcp", "proxy"),
        "mutating",
        "the tool returns a fixed, out-of-date result",
    )
)
register(
    FaultType(
        "tool.corrupt",
        CorruptOptions,
        ("mcp", "proxy"),
        "mutating",
        "the tool result is damaged (emptied, fields dropped, nulled, nested, truncated, garbled)",
    )
)
register(FaultType("tool.latency", ToolLatencyOptions, ("mcp",), "fail-safe", "the tool result arrives late"))


# ---------------------------------------------------------------- injection: what a faulted result looks like

ERROR_TEXT = {
    "execution": "tool execution failed: the command exited with an internal error",
    "timeout": "tool call timed out after 30s without a result",
    "network": "network error: the connection was reset while calling the tool",
    "validation": "invalid arguments: the tool rejected its input",
}
GARBAGE = "#@!%&*?~^"


def error_message(opts: ToolErrorOptions, canary: str) -> str:
    """The failure text the agent reads; it always carries the canary."""
    return f"{opts.message or ERROR_TEXT[opts.error_kind]} [{canary}]"


def stale_text(opts: StaleDataOptions) -> str:
    return opts.result if isinstance(opts.result, str) else json.dumps(opts.result)


def result_rewriters(inj) -> tuple[Callable[[str], str], Callable[[Any], Any], dict[str, Any]]:
    """For a result fault (stale_data, corrupt, inject.tool_result): how it rewrites a result's text, how it
    rewrites structured data, and the details its fault_injected event records."""
    from mitmchaos.addons.faults.inject import (
        inject_text,  # here, so the catalog keeps tool.* before inject.*
    )

    opts, canary = inj.options, inj.canary
    if inj.id == "tool.stale_data":
        return (lambda text: stale_text(opts)), (lambda value: opts.result), {}
    if inj.id == "tool.corrupt":  # a fresh seeded draw for each form, so both are damaged alike
        return (
            (lambda text: corrupt_text(text, opts, inj.rng())),
            (lambda value: corrupt_value(value, opts, inj.rng())),
            {"variant": opts.variant, "ratio": opts.ratio},
        )
    inject = partial(inject_text, opts=opts, canary=canary)
    return inject, (lambda value: _top_level_strings(value, inject)), {"position": opts.position}


def _top_level_strings(value: Any, rewrite: Callable[[str], str]) -> Any:
    if isinstance(value, dict):
        return {k: rewrite(v) if isinstance(v, str) else v for k, v in value.items()}
    return value


def corrupt_text(text: str, opts: CorruptOptions, rng: random.Random) -> str:
    """A damaged copy of a tool result's text: JSON is damaged as data, other text line by line."""
    if opts.variant == "truncated_result":
        return text[: opts.max_length]
    try:
        value = json.loads(text)
    except ValueError:
        return _corrupt_plain(text, opts, rng)
    return json.dumps(corrupt_value(value, opts, rng))


def corrupt_value(value: Any, opts: CorruptOptions, rng: random.Random) -> Any:
    """A damaged copy of a JSON value; ``ratio`` of its fields (at least one) are hit, chosen by ``rng``."""
    variant = opts.variant
    if variant == "empty_result":
        return type(value)() if isinstance(value, (dict, list, str)) else None
    if variant == "unexpected_nesting":
        return {"data": {"result": value}}
    if variant == "truncated_result":
        return _map_leaves(value, lambda leaf: leaf[: opts.max_length] if isinstance(leaf, str) else leaf)
    if variant == "missing_fields":
        doomed = _pick(_paths(value, keys_only=True), opts.ratio, rng)
        return _without(value, doomed, ())
    doomed = _pick(_paths(value, keys_only=False), opts.ratio, rng)
    hit = (lambda leaf: None) if variant == "null_fields" else (lambda leaf: _garble(leaf, rng))
    return _map_leaves(value, lambda leaf, path: hit(leaf) if path in doomed else leaf, with_path=True)


def _corrupt_plain(text: str, opts: CorruptOptions, rng: random.Random) -> str:
    if opts.variant == "empty_result":
        return ""
    if opts.variant == "unexpected_nesting":
        return json.dumps({"data": {"text": text}})
    unit = " " if opts.variant == "corrupt_values" else "\n"
    parts = text.split(unit)
    doomed = _pick([(i,) for i in range(len(parts))], opts.ratio, rng)
    if opts.variant == "missing_fields":
        return unit.join(p for i, p in enumerate(parts) if (i,) not in doomed)
    replace = (lambda p: "null") if opts.variant == "null_fields" else (lambda p: _garble(p, rng))
    return unit.join(replace(p) if (i,) in doomed else p for i, p in enumerate(parts))


def _paths(value: Any, keys_only: bool, prefix: tuple = ()) -> list[tuple]:
    """Paths to the fields of a JSON value: every dict key (keys_only) or every leaf."""
    items = (
        value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else None
    )
    if items is None:
        return [] if keys_only else [prefix]
    paths = []
    for key, child in items:
        if keys_only and isinstance(value, dict):
            paths.append(prefix + (key,))
        paths += _paths(child, keys_only, prefix + (key,))
    return paths


def _pick(paths: list[tuple], ratio: float, rng: random.Random) -> set[tuple]:
    if not paths or ratio == 0:
        return set()
    return set(rng.sample(paths, max(1, round(ratio * len(paths)))))


def _without(value: Any, doomed: set[tuple], prefix: tuple) -> Any:
    if isinstance(value, dict):
        return {
            k: _without(v, doomed, prefix + (k,)) for k, v in value.items() if prefix + (k,) not in doomed
        }
    if isinstance(value, list):
        return [_without(v, doomed, prefix + (i,)) for i, v in enumerate(value)]
    return value


def _map_leaves(value: Any, fn, with_path: bool = False, prefix: tuple = ()) -> Any:
    if isinstance(value, dict):
        return {k: _map_leaves(v, fn, with_path, prefix + (k,)) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_leaves(v, fn, with_path, prefix + (i,)) for i, v in enumerate(value)]
    return fn(value, prefix) if with_path else fn(value)


def _garble(leaf: Any, rng: random.Random) -> Any:
    """A wrong value of a wrong type: garbled text, numbers turned into text, flipped booleans."""
    if isinstance(leaf, bool):
        return not leaf
    if isinstance(leaf, (int, float)):
        return f"{leaf}{rng.choice(GARBAGE)}"
    if isinstance(leaf, str):
        return "".join(rng.choice(GARBAGE) for _ in range(max(len(leaf), 1)))
    return rng.choice(GARBAGE)
