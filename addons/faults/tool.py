"""tool.*: faults on tool calls, on MCP traffic and on the agent's built-in tools at the model API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mitmchaos.addons.faults import FaultOptions, FaultType, register


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
        "empty_result", "missing_fields", "null_fields", "unexpected_nesting", "truncated_result", "corrupt_values"
    ] = Field("corrupt_values", description="how the result is damaged")
    ratio: float = Field(0.5, ge=0, le=1, description="share of fields hit (missing, null, corrupt variants)")
    max_length: int = Field(20, ge=0, le=1_000_000, description="truncated_result: keep this many characters")


class ToolLatencyOptions(FaultOptions):
    delay_s: float = Field(1.0, ge=0, le=5, description="delay before the tool result (the mean, for a distribution)")
    jitter_s: float = Field(0.0, ge=0, le=5, description="spread of the distribution")
    distribution: Literal["fixed", "uniform", "normal", "pareto"] = Field("fixed", description="seeded draw")


register(FaultType("tool.error", ToolErrorOptions, ("mcp", "proxy"), "fail-safe",
                   "the tool call fails with a message"))
register(FaultType("tool.stale_data", StaleDataOptions, ("mcp", "proxy"), "mutating",
                   "the tool returns a fixed, out-of-date result"))
register(FaultType("tool.corrupt", CorruptOptions, ("mcp", "proxy"), "mutating",
                   "the tool result is damaged (emptied, fields dropped, nulled, nested, truncated, garbled)"))
register(FaultType("tool.latency", ToolLatencyOptions, ("mcp",), "fail-safe",
                   "the tool result arrives late"))
