"""llm.*: faults on the model API (Anthropic Messages, OpenAI Chat Completions and Responses).

The options models register the faults; ``inject`` applies them to one model call, in
the ModelAPI addon's ``request`` hook. Decision points, one ``consider`` each: a failure
(rate limit, 5xx or stream cut, timeout), then the request rewrites (trim, degrade), then
latency.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from mitmchaos.addons.annotate import annotate
from mitmchaos.addons.faults import FaultOptions, FaultType, register
from mitmchaos.addons.state import Target

if TYPE_CHECKING:
    from mitmproxy import http

    from mitmchaos.addons.model_api import Call
    from mitmchaos.addons.state import ChaosState, Injection

log = logging.getLogger(__name__)

Distribution = Literal["fixed", "uniform", "normal", "pareto"]


class RateLimitOptions(FaultOptions):
    retry_after_s: float = Field(5, ge=0, le=3600, description="value of the retry-after header, in seconds")


class Upstream5xxOptions(FaultOptions):
    status: Literal[500, 502, 503, 529] = Field(503, description="the error status (529 is Anthropic's overloaded)")
    stream_cut_after_chunks: int | None = Field(
        None, ge=0, le=100_000,
        description="cut a streamed answer after this many SSE events instead of failing it",
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
    per_chunk: bool = Field(
        False, description="delay every read of a streamed answer (stalls mid-stream) instead of its start"
    )


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


RATE_LIMIT, UPSTREAM_5XX, CONTEXT_TRIM = "llm.rate_limit", "llm.upstream_5xx", "llm.context_trim"
MODEL_DEGRADE, LATENCY, TIMEOUT = "llm.model_degrade", "llm.latency", "llm.timeout"
HANDLES = (RATE_LIMIT, UPSTREAM_5XX, CONTEXT_TRIM, MODEL_DEGRADE, LATENCY, TIMEOUT)
HANG_POLL_S = 0.1  # how often a hung call checks whether the agent gave up
STATUS_TEXT = {500: "Internal server error", 502: "Bad gateway", 503: "Service unavailable",
               529: "Overloaded"}


def inject(state: ChaosState, call: Call, flow: http.HTTPFlow) -> Awaitable[None] | None:
    """The llm faults' decisions for one call; what it returns is to be awaited, if anything."""
    target = Target(host=call.host, model=call.request.model)
    if not state.matching(HANDLES, target):
        return None  # no llm fault takes this call: each decision point would find none
    return _inject(state, target, call, flow)


async def _inject(state: ChaosState, target: Target, call: Call, flow: http.HTTPFlow) -> None:
    failure = state.consider((RATE_LIMIT, UPSTREAM_5XX, TIMEOUT), target, flow)
    if failure is not None and await _fail(state, failure, call, flow):
        return
    for fault_id, rewrite in ((CONTEXT_TRIM, _trim), (MODEL_DEGRADE, _degrade)):
        injection = state.consider((fault_id,), target, flow)
        if injection is not None:
            rewrite(injection, call, flow)
    latency = state.consider((LATENCY,), target, flow)
    if latency is None:
        return
    if latency.options.per_chunk:
        call.chunk_delay = ChunkDelay(state, latency, call, flow)
        return
    delay = draw_delay(latency.options, latency.rng())
    if state.grant_latency(latency, delay):
        _applied(latency, call, flow, f"{delay:.2f}s before the response", delay_s=round(delay, 3),
                 per_chunk=False)
        await asyncio.sleep(delay)


def _applied(injection: Injection, call: Call, flow: http.HTTPFlow, summary: str, **details) -> None:
    event = injection.applied(**details)
    annotate(flow, event, summary)
    call.faulted = call.faulted or injection.id


async def _fail(state: ChaosState, injection: Injection, call: Call, flow: http.HTTPFlow) -> bool:
    """Apply a failure; False when the call still goes upstream (a stream cut, a refused hang)."""
    opts, canary = injection.options, injection.canary
    if injection.id == RATE_LIMIT:
        message = f"Rate limit exceeded: please retry after {opts.retry_after_s:g}s. [{canary}]"
        flow.response = error_response(call.provider, 429, message, opts.retry_after_s)
        _applied(injection, call, flow, f"429, retry-after {opts.retry_after_s:g}s", status=429,
                 retry_after_s=opts.retry_after_s)
        return True
    if injection.id == UPSTREAM_5XX:
        if opts.stream_cut_after_chunks is not None and call.request.stream:
            call.cut = StreamCut(injection, call, flow)
            return False
        flow.response = error_response(call.provider, opts.status, f"{STATUS_TEXT[opts.status]}. [{canary}]")
        _applied(injection, call, flow, str(opts.status), status=opts.status)
        return True
    if not state.grant_latency(injection, opts.hang_s):
        return False
    _applied(injection, call, flow, f"hang up to {opts.hang_s:g}s", hang_s=opts.hang_s)
    from mitmproxy.connection import ConnectionState

    started = time.monotonic()
    # Held until the agent gives up (closes its side) or hang_s passes, then dropped.
    while time.monotonic() - started < opts.hang_s and flow.client_conn.state & ConnectionState.CAN_READ:
        await asyncio.sleep(min(HANG_POLL_S, opts.hang_s - (time.monotonic() - started)))
    call.error = f"timeout: held {time.monotonic() - started:.1f}s, then dropped"
    if flow.killable:
        flow.kill()
    return True


def error_response(provider, status: int, message: str, retry_after_s: float | None = None) -> http.Response:
    """The provider's own error body and headers (rate-limit headers and retry-after for 429s)."""
    from mitmproxy import http

    body, headers = provider.error(status, message)
    if retry_after_s is not None:
        headers.update(provider.rate_limit_headers(retry_after_s))
        headers["retry-after"] = str(math.ceil(retry_after_s))
        headers["retry-after-ms"] = str(round(retry_after_s * 1000))
    response = http.Response.make(status, json.dumps(body), {"content-type": "application/json", **headers})
    if status == 529:
        response.reason = "Overloaded"  # not in mitmproxy's status table
    return response


def _trim(injection: Injection, call: Call, flow: http.HTTPFlow) -> None:
    opts = injection.options
    body = json.loads(flow.request.get_text())  # read again: a tool-result subscriber may have rewritten it
    dropped, dropped_system = call.provider.trim(body, opts.drop_oldest, opts.drop_system)
    if not dropped and not dropped_system:
        return
    flow.request.set_text(json.dumps(body))
    summary = f"dropped {dropped} message(s)" + (" and the system prompt" if dropped_system else "")
    _applied(injection, call, flow, summary, dropped_messages=dropped, dropped_system=dropped_system)


def _degrade(injection: Injection, call: Call, flow: http.HTTPFlow) -> None:
    to_model = injection.options.to_model
    if isinstance(to_model, dict):
        to_model = to_model.get(call.provider.family)
    if not to_model or to_model == call.request.model:
        return
    body = json.loads(flow.request.get_text())
    body["model"] = to_model
    flow.request.set_text(json.dumps(body))
    _applied(injection, call, flow, f"{call.request.model} -> {to_model}", from_model=call.request.model,
             to_model=to_model)


def draw_delay(opts: LatencyOptions, rng) -> float:
    """One delay, in seconds, from the configured (seeded) distribution."""
    mean, spread = opts.delay_s, opts.jitter_s
    if opts.distribution == "uniform":
        return rng.uniform(max(0.0, mean - spread), mean + spread)
    if opts.distribution == "normal":
        return max(0.0, rng.gauss(mean, spread))
    if opts.distribution == "pareto":  # delay_s plus a heavy tail (alpha 3) scaled by jitter_s, capped
        return mean + min(spread * (rng.paretovariate(3) - 1), 10 * spread)
    return mean


def _connection_handler(flow: http.HTTPFlow):
    """The live handler of the flow's client connection, or None once it is gone.

    Private mitmproxy 12 internals (the version is pinned in pyproject.toml).
    """
    from mitmproxy import ctx

    return ctx.master.addons.get("proxyserver").connections.get(flow.client_conn.id)


def close_client(flow: http.HTTPFlow) -> None:
    """Close the agent's connection now; bytes already queued are flushed first, nothing after.

    ``flow.kill()`` during a stream only acts when the upstream finishes, so the client
    connection is closed directly (on HTTP/2 this drops every stream of the connection).
    """
    handler = _connection_handler(flow)
    if handler is not None:
        asyncio.get_running_loop().call_soon(handler.close_connection, handler.client)


class StreamCut:
    """llm.upstream_5xx with stream_cut_after_chunks: pass that many SSE events, then end the stream.

    reset: the connection closes with no end-of-body marker (clients raise a connection error);
    silent: the body ends cleanly early (clients return partial text and no error).
    """

    def __init__(self, injection: Injection, call: Call, flow: http.HTTPFlow) -> None:
        self.injection, self.call, self.flow = injection, call, flow
        self.after = injection.options.stream_cut_after_chunks
        self.mode = injection.options.cut_mode
        self.passed = 0
        self.done = False

    def filter(self, data: bytes, event_ends: list[int]) -> tuple[list[bytes], int]:
        """The bytes to forward from ``data`` and how many of its events pass."""
        if self.done:
            return [], 0
        room = self.after - self.passed
        if len(event_ends) < room:
            self.passed += len(event_ends)
            return [data], len(event_ends)
        keep = data[:event_ends[room - 1]] if room > 0 else b""
        self.done = True
        self.call.error = f"stream cut after {self.after} chunks ({self.mode})"
        _applied(self.injection, self.call, self.flow, f"stream cut after {self.after} chunks ({self.mode})",
                 status=200, cut_after_chunks=self.after, cut_mode=self.mode)
        close_client(self.flow)
        # b"" is the chunked end-of-body marker: the silent cut's clean early end
        out = [keep] if keep else []
        return (out + [b""] if self.mode == "silent" else out), room


class ChunkDelay:
    """llm.latency with per_chunk: every read of the upstream stream waits for a seeded delay.

    The stream callable runs synchronously on the event loop, so sleeping there would stall
    every connection; instead the server connection's reader is wrapped (private mitmproxy
    internals) so that each read awaits its delay. The agent sees the stream stall for each
    delay, then a burst of whatever the upstream sent meanwhile: with a fast upstream, one
    read may carry many events (per network read, not per SSE event).
    """

    def __init__(self, state: ChaosState, injection: Injection, call: Call, flow: http.HTTPFlow) -> None:
        self.state, self.injection, self.call, self.flow = state, injection, call, flow
        self.rng = injection.rng()
        self.total = 0.0
        self.delayed = 0
        self.refused = False
        self.restore: Callable[[], None] | None = None

    def start(self) -> None:
        try:
            reader = _connection_handler(self.flow).transports[self.flow.server_conn].reader
            read = reader.read
        except (KeyError, AttributeError):  # the connection is gone, or not a wrappable stream
            log.warning("mitmchaos: per-chunk latency needs a live upstream connection; not applied")
            return

        async def delayed_read(n: int = -1) -> bytes:
            await asyncio.sleep(self._next())
            return await read(n)

        reader.read = delayed_read
        self.restore = lambda: reader.__dict__.pop("read", None)

    async def before_first_chunk(self) -> None:
        # The read carrying the first chunk is already waiting when the stream starts.
        if self.restore is not None:
            await asyncio.sleep(self._next())

    def _next(self) -> float:
        if self.refused:
            return 0.0
        delay = draw_delay(self.injection.options, self.rng)
        if not self.state.grant_latency(self.injection, delay):
            self.refused = True  # the budget is spent: the rest of the stream flows freely
            return 0.0
        self.total += delay
        self.delayed += 1
        return delay

    def finish(self) -> None:
        self.refused = True  # a read already waiting must not spend more budget
        if self.restore is not None:
            self.restore()
        if self.delayed:
            _applied(self.injection, self.call, self.flow, f"{self.total:.2f}s over {self.delayed} chunks",
                     delay_s=round(self.total, 3), per_chunk=True, chunks_delayed=self.delayed)
