"""Request overhead: small non-streaming /v1/messages calls, direct vs bare mitmdump vs the addons
in mitmdump (suite) and in `mitmchaos proxy` (mitmchaos), over HTTP (forward proxy) and HTTPS
(reverse mode), in rounds of short blocks that take turns."""

from __future__ import annotations

import http.client
import tempfile
import time
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path

from bench.client import Route, direct, forward, in_turn, message_body, reverse_tls
from bench.proxies import HOSTS, JUDGED_HOST, cpu_seconds, start_proxy
from bench.results import Figure, median, paired_ratio, percentile, spread
from bench.upstream import Upstream

BODY = message_body(stream=False)
# the addons within 10% of bare mitmdump, in JUDGED_HOST
THROUGHPUT_GOAL = 0.90
LATENCY_GOAL = 1.10
WARM_UP = 20  # calls per route before measuring: connections, TLS, the addons' first-call work
BLOCK = 10  # calls to one route before the next takes over
# Proxy processes per kind, pooled: identical mitmdump processes differ by up to ~5% in CPU per
# request (memory layout, hash seed), and one of each would carry that luck into the ratios.
INSTANCES = 2


@dataclass
class Round:
    throughput: float
    p50_ms: float
    p99_ms: float
    proxy_cpu_ms: float | None  # the proxy's CPU time per request


@dataclass
class Tally:
    """One route's share of a round, gathered block by block."""

    latencies: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    cpu: float = 0.0

    def send(self, route: Route, conn: http.client.HTTPConnection, requests: int) -> None:
        cpu_before = cpu_seconds(route.proxy_pid) if route.proxy_pid else 0.0
        started = time.perf_counter()
        for _ in range(requests):
            t0 = time.perf_counter()
            route.send(conn, BODY).read()
            self.latencies.append(time.perf_counter() - t0)
        self.elapsed += time.perf_counter() - started
        if route.proxy_pid:
            self.cpu += cpu_seconds(route.proxy_pid) - cpu_before

    def round(self, route: Route) -> Round:
        n = len(self.latencies)
        return Round(n / self.elapsed, percentile(self.latencies, 0.5) * 1000,
                     percentile(self.latencies, 0.99) * 1000,
                     self.cpu / n * 1000 if route.proxy_pid else None)


def one_round(routes: list[tuple[Route, http.client.HTTPConnection]], requests: int) -> dict[str, Round]:
    """``requests`` per route, taken in blocks of BLOCK that rotate through the routes: the VM's
    speed drifts within seconds, and every route then sees the same drift. Routes of one name
    (instances of one proxy kind) are pooled into one figure."""
    tallies = {route.name: Tally() for route, _ in routes}
    for block in range(requests // BLOCK):
        for route, conn in in_turn(routes, block):
            tallies[route.name].send(route, conn, BLOCK)
    return {route.name: tallies[route.name].round(route) for route, _ in routes}


def run(rounds: int = 10, requests: int = 80) -> list[Figure]:
    with ExitStack() as stack:
        upstream = stack.enter_context(Upstream())
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mitmchaos-bench-")))
        routes = [direct(upstream.url)]
        for instance in range(INSTANCES):
            for host in HOSTS:
                proxy = start_proxy(workdir / f"{host}-http-{instance}", host)
                stack.callback(proxy.stop)
                routes.append(forward(f"{host} HTTP", proxy, upstream.url))
            for host in HOSTS:
                proxy = start_proxy(workdir / f"{host}-https-{instance}", host, mode=f"reverse:{upstream.url}")
                stack.callback(proxy.stop)
                routes.append(reverse_tls(f"{host} HTTPS", proxy))
        connected = [(route, stack.enter_context(closing(route.connect()))) for route in routes]
        for route, conn in connected:
            for _ in range(WARM_UP):
                route.send(conn, BODY).read()
        results: dict[str, list[Round]] = {}
        for _ in range(rounds):
            for name, measured in one_round(connected, requests).items():
                results.setdefault(name, []).append(measured)
    return figures(results)


def figures(results: dict[str, list[Round]]) -> list[Figure]:
    out = []
    for name, rounds in results.items():
        kind, transport = name.split()
        reference = {"direct": None, "bare": "direct HTTP"}.get(kind, f"bare {transport}")  # the addons: bare
        for metric, label, unit in (
            ("throughput", "throughput", "req/s"),
            ("p50_ms", "p50 latency", "ms"),
            ("p99_ms", "p99 latency", "ms"),
            ("proxy_cpu_ms", "proxy CPU per request", "ms"),
        ):
            if kind == "direct" and metric == "proxy_cpu_ms":
                continue
            values = [getattr(r, metric) for r in rounds]
            figure = Figure("requests", f"{name}: {label}", median(values), unit, spread(values))
            if reference and not (kind == "bare" and metric == "proxy_cpu_ms"):  # direct has no proxy
                figure.ratio = paired_ratio(values, [getattr(r, metric) for r in results[reference]])
                figure.goal = f"vs {reference.split()[0]}"
            judged = kind == JUDGED_HOST
            if judged and metric == "throughput":
                figure.goal, figure.met = f"≥ {THROUGHPUT_GOAL:.2f}× bare", figure.ratio >= THROUGHPUT_GOAL
            elif judged and metric == "p50_ms":
                figure.goal, figure.met = f"≤ {LATENCY_GOAL:.2f}× bare", figure.ratio <= LATENCY_GOAL
            out.append(figure)
    return out
