"""The benchmark harness (bench/) at tiny sizes: it runs and writes its table and JSON.
Benchmarks are never timed here; only the output's structure is checked."""

from __future__ import annotations

import json
import math

import pytest
from mitmchaos import images

from bench import run
from tests.sandboxed import require_podman

pytestmark = pytest.mark.slow
FIELDS = {"bench", "name", "value", "unit", "spread", "goal", "ratio", "met", "note"}


def bench(tmp_path, only: str) -> dict:
    assert run.main(["--quick", "--only", only, "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "latest.json").read_text())
    table = (tmp_path / "latest.md").read_text()
    assert {"date", "machine", "settings", "figures", "missed"} <= doc.keys()
    for figure in doc["figures"]:
        assert figure.keys() == FIELDS
        assert f"| {figure['bench']} | {figure['name']} |" in table
        assert figure["met"] in (True, False, None)
    assert table.count("\n| ") == len(doc["figures"]) + 1  # a row per figure, plus the header
    return doc


def test_proxy_and_scoring_benchmarks_write_every_figure(tmp_path):
    doc = bench(tmp_path, "requests,streaming,scoring")
    names = {f["name"] for f in doc["figures"]}
    for host in ("bare", "suite", "mitmchaos"):
        assert {f"{host} HTTP: throughput", f"{host} HTTPS: throughput"} <= names
    by_name = {f["name"]: f for f in doc["figures"]}
    for host in ("suite", "mitmchaos"):  # the addons in mitmdump, and in `mitmchaos proxy`
        assert f"{host}: first chunk" in names and f"{host}: proxy peak RSS (VmHWM)" in names
        assert (
            by_name[f"{host}: chunks arriving separately"]["value"]
            == by_name["direct HTTP: chunks arriving separately"]["value"]
        )
    assert by_name["bare buffering: chunks arriving separately"]["value"] == 1  # what buffering looks like
    # the speed goals are judged on `mitmchaos proxy`; the suite's rows keep their ratios, without one
    speed = ("HTTP: throughput", "HTTP: p50 latency", "HTTPS: throughput", "HTTPS: p50 latency")
    for figure in (*(f"mitmchaos {name}" for name in speed), "mitmchaos: first chunk"):
        assert by_name[figure]["met"] is not None, figure
    for figure in (*(f"suite {name}" for name in speed), "suite: first chunk", "bare streaming: first chunk"):
        assert by_name[figure]["met"] is None and by_name[figure]["ratio"] is not None, figure
    assert by_name["suite: chunks arriving separately"]["met"] is not None  # nothing may buffer, in any host
    assert all(f["ratio"] > 0 for f in doc["figures"] if f["ratio"] is not None)
    assert sum(f["bench"] == "scoring" for f in doc["figures"]) == 3
    assert sorted(doc["missed"]) == sorted(
        f"{f['bench']}: {f['name']}" for f in doc["figures"] if f["met"] is False
    )


@pytest.mark.podman
def test_repetition_benchmark_times_every_phase(tmp_path):
    require_podman()
    images.ensure_image(images.default_image())
    doc = bench(tmp_path, "repetition")
    phases = [f for f in doc["figures"] if f["name"].startswith("phase: ")]
    assert len(phases) == 11 and all(math.isfinite(f["value"]) and f["value"] >= 0 for f in phases)


def test_request_rounds_rotate_short_blocks_through_the_routes():
    from bench import request_overhead
    from bench.client import Route

    calls: list[str] = []

    class Reply:
        def read(self) -> bytes:
            return b""

    def route(name: str, label: str) -> Route:
        made = Route(name, connect=lambda: None, target="/", proxy_pid=None)
        made.send = lambda conn, body: calls.append(label) or Reply()
        return made

    # two instances of "b", pooled into one figure
    routes = [(route("a", "a"), None), (route("b", "b1"), None), (route("b", "b2"), None)]
    measured = request_overhead.one_round(routes, 3 * request_overhead.BLOCK)
    blocks = [calls[i] for i in range(0, len(calls), request_overhead.BLOCK)]
    assert blocks == ["a", "b1", "b2", "b1", "b2", "a", "b2", "a", "b1"]  # each block's first call
    assert measured.keys() == {"a", "b"}
    assert all(m.throughput > 0 and m.proxy_cpu_ms is None for m in measured.values())
