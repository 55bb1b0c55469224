"""llm.*: faults on the model API (Anthropic Messages, OpenAI Chat Completions and Responses)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mitmchaos.addons.faults import FaultOptions, FaultType, register

Distribution = Literal["fixed", "uniform", "normal", "pareto"]


class RateLimitOptions(FaultOptions):
    retry_after_s: float = Field(5, ge=0, le=3600, description="value of the retry-after header, in seconds")


class Upstream5xxOptions(FaultOptions):
    status: Literal[500, 502, 503, 529] = Field(503, description="the error status (529 is Anthropic's overloaded)")
    stream_cut_after_chunks: int | None = Field(
        None, ge=0, le=100_000, description="cut a streamed answer after this many chunks instead of failing it"
    )
    cut_mode: Literal["reset", "silent"] = Field(
        "reset", description="reset: the connection drops mid-stream; silent: the stream ends early with no error"
    )


class ContextTrimOptions(FaultOptions):
    drop_oldest: int = Field(0, ge=0, le=10_000, description="drop this many of the oldest messages")
    drop_system: bool = Field(False, description="drop the system prompt")

    @model_validator(mode="after")
    def _does_something(self):
        if self.drop_oldest == 0 and not self.drop_system:
            raise ValueError("set drop_oldest above 0, drop_system: true, or both")
        return self


class ModelDegradeOptions(FaultOptions):
    to_model: str | dict[Literal["anthropic", "openai"], str] = Field(
        default_factory=lambda: {"anthropic": "claude-haiku-4-5", "openai": "gpt-4o-mini"},
        description="the model that serves the request: one name, or one per provider",
    )


class LatencyOptions(FaultOptions):
    delay_s: float = Field(1.0, ge=0, le=600, description="the delay (the mean, for a distribution)")
    jitter_s: float = Field(0.0, ge=0, le=600, description="spread of the distribution")
    distribution: Distribution = Field("fixed", description="how each delay is drawn (seeded)")
    per_chunk: bool = Field(False, description="delay every streamed chunk instead of the response start")


class TimeoutOptions(FaultOptions):
    hang_s: float = Field(120, gt=0, le=900, description="hold the call this long, then drop the connection")


register(FaultType("llm.rate_limit", RateLimitOptions, ("proxy",), "fail-safe",
                   "the model call returns 429 with retry-after"))
register(FaultType("llm.upstream_5xx", Upstream5xxOptions, ("proxy",), "fail-safe",
                   "the model call fails with a 5xx, or its stream is cut"))
register(FaultType("llm.context_trim", ContextTrimOptions, ("proxy",), "mutating",
                   "older messages (or the system prompt) are dropped from the request"))
register(FaultType("llm.model_degrade", ModelDegradeOptions, ("proxy",), "mutating",
                   "the request is served by another model"))
register(FaultType("llm.latency", LatencyOptions, ("proxy",), "fail-safe",
                   "the response (or each streamed chunk) is delayed"))
register(FaultType("llm.timeout", TimeoutOptions, ("proxy",), "fail-safe",
                   "the call hangs until the client gives up (bounded by hang_s)"))
