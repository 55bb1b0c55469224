"""Streaming: time to first chunk and the gaps between chunks of an SSE stream the upstream emits
on a schedule, direct vs bare mitmdump (buffering, its default), bare mitmdump with streaming on,
and the addons in mitmdump (suite) and in `mitmchaos proxy` (mitmchaos); then the proxies' peak
RSS over the run (VmHWM)."""

from __future__ import annotations

import http.client
import itertools
import tempfile
import time
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path

from bench.client import Route, direct, forward, in_turn, message_body
from bench.proxies import JUDGED_HOST, peak_rss_mib, start_proxy
from bench.results import Figure, median, spread
from bench.upstream import Upstream

BODY = message_body(stream=True)
WORDS = 14  # an Anthropic stream of 14 text deltas is 20 SSE events
CHUNKS = WORDS + 6
FIRST_CHUNK_GOAL_MS = 3.0  # after direct
GAP_GOAL_MS = 3.0  # median |gap - schedule|: chunk timing preserved


@dataclass
class Stream:
    first_chunk_ms: float
    reads: int  # separate arrivals: fewer than CHUNKS means something buffered
    gap_error_ms: float  # median |gap - schedule| over the stream's gaps
    worst_gap_error_ms: float


def one_stream(route: Route, conn: http.client.HTTPConnection, chunk_delay_s: float) -> Stream:
    t0 = time.perf_counter()
    response = route.send(conn, BODY)
    arrivals = []
    while response.read1(65536):  # at most one HTTP chunk per read
        arrivals.append(time.perf_counter() - t0)
    gaps = [abs(b - a - chunk_delay_s) * 1000 for a, b in itertools.pairwise(arrivals)]
    return Stream(arrivals[0] * 1000, len(arrivals), median(gaps) if gaps else 0.0, max(gaps, default=0.0))


def run(rounds: int = 10, chunk_delay_s: float = 0.05) -> list[Figure]:
    with ExitStack() as stack:
        upstream = stack.enter_context(Upstream(words=WORDS, chunk_delay_s=chunk_delay_s))
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mitmchaos-bench-")))
        routes, proxies = [direct(upstream.url)], {}
        for name, host, options in (
            ("bare buffering", "bare", {}),
            ("bare streaming", "bare", {"stream_large_bodies": "1"}),
            ("suite", "suite", {}),
            ("mitmchaos", "mitmchaos", {}),
        ):
            proxy = start_proxy(workdir / name.replace(" ", "-"), host, **options)
            stack.callback(proxy.stop)
            proxies[name] = proxy
            routes.append(forward(name, proxy, upstream.url))
        conns = {route.name: stack.enter_context(closing(route.connect())) for route in routes}
        for route in routes:
            one_stream(route, conns[route.name], chunk_delay_s)  # warm-up
        warm_rss = {name: peak_rss_mib(p.process.pid) for name, p in proxies.items()}
        results: dict[str, list[Stream]] = {route.name: [] for route in routes}
        for round_ in range(rounds):
            for route in in_turn(routes, round_):
                results[route.name].append(one_stream(route, conns[route.name], chunk_delay_s))
        peak_rss = {name: peak_rss_mib(p.process.pid) for name, p in proxies.items()}
    return stream_figures(results, chunk_delay_s) + memory_figures(warm_rss, peak_rss)


def stream_figures(results: dict[str, list[Stream]], chunk_delay_s: float) -> list[Figure]:
    out = []
    direct_first = [s.first_chunk_ms for s in results["direct HTTP"]]
    schedule = f"{CHUNKS} chunks {chunk_delay_s * 1000:.0f} ms apart"
    for name, streams in results.items():
        first = [s.first_chunk_ms for s in streams]
        figure = Figure("streaming", f"{name}: first chunk", median(first), "ms", spread(first))
        if name != "direct HTTP":
            after = [f - d for f, d in zip(first, direct_first, strict=True)]
            figure.ratio = median([f / d for f, d in zip(first, direct_first, strict=True)])
            figure.goal = "vs direct"
            figure.note = f"{median(after):+.1f} ms after direct (median of paired differences)"
            if name in ("suite", "mitmchaos"):
                bare_first = [s.first_chunk_ms for s in results["bare streaming"]]
                figure.note += (
                    f", {median([f - b for f, b in zip(first, bare_first)]):+.1f} ms after bare streaming"
                )
            if name == JUDGED_HOST:
                figure.goal = f"≤ direct + {FIRST_CHUNK_GOAL_MS:.0f} ms"
                figure.met = median(after) <= FIRST_CHUNK_GOAL_MS
        out.append(figure)
        reads = [s.reads for s in streams]
        out.append(
            Figure(
                "streaming",
                f"{name}: chunks arriving separately",
                median(reads),
                f"of {CHUNKS}",
                spread(reads),
                f"{CHUNKS} (no buffering)",
                met=None if name == "bare buffering" else min(reads) == CHUNKS,
            )
        )
        if name == "bare buffering":
            continue  # one arrival: no gaps to time
        gap_errors = [s.gap_error_ms for s in streams]
        worst = max(s.worst_gap_error_ms for s in streams)
        out.append(
            Figure(
                "streaming",
                f"{name}: gap error (median abs(gap - {chunk_delay_s * 1000:.0f} ms))",
                median(gap_errors),
                "ms",
                spread(gap_errors),
                f"≤ {GAP_GOAL_MS:.0f} ms",
                met=median(gap_errors) <= GAP_GOAL_MS,
                note=f"{schedule}; worst single gap off by {worst:.1f} ms",
            )
        )
    return out


def memory_figures(warm_rss: dict[str, float], peak_rss: dict[str, float]) -> list[Figure]:
    out = []
    for name in ("bare streaming", "suite", "mitmchaos"):
        figure = Figure(
            "memory",
            f"{name}: proxy peak RSS (VmHWM)",
            peak_rss[name],
            "MiB",
            note=f"{peak_rss[name] - warm_rss[name]:+.1f} MiB over the streams after warm-up",
        )
        if name != "bare streaming":
            figure.ratio, figure.goal = (
                peak_rss[name] / peak_rss["bare streaming"],
                "vs bare (no goal in #11)",
            )
        out.append(figure)
    return out
