"""ChaosCore with mitmproxy's own test helpers, and a real mitmdump process."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mitmproxy.test import taddons

from mitmchaos.addons.core import ChaosCore
from mitmchaos.addons.state import ChaosState, Target
from mitmchaos.events import EventWriter, read_events
from mitmchaos.plan import parse_plan_text
from mitmchaos.proxy import ChaosProxy, addon_script, free_port, mitmdump_binary
from tests.conftest import ROOT, VALID_PLAN


def test_core_loads_plan_and_announces_it(tmp_path, plan_file):
    plan = plan_file(VALID_PLAN)
    events = tmp_path / "ev.jsonl"
    core = ChaosCore()
    with taddons.context(core) as tctx:
        tctx.configure(core, chaos_plan=str(plan), chaos_events=str(events), chaos_run_id="r1",
                       chaos_canary="E-CHAOS-0123abcd")
        assert core.state is not None and core.state.canary == "E-CHAOS-0123abcd"
    (loaded,) = read_events(events).of_type("plan_loaded")
    assert loaded["run_id"] == "r1" and loaded["component"] == "proxy" and loaded["faults"] == ["llm.rate_limit"]


def test_core_rejects_bad_canary(plan_file):
    core = ChaosCore()
    with taddons.context(core) as tctx:
        with pytest.raises(Exception, match="chaos_canary"):
            tctx.configure(core, chaos_canary="nope")


def _state(tmp_path, faults_yaml: str, extra: str = "") -> ChaosState:
    plan = parse_plan_text(VALID_PLAN.replace("  - id: llm.rate_limit\n", faults_yaml) + extra)
    return ChaosState(plan, EventWriter(tmp_path / "ev.jsonl", "r", "proxy"), "E-CHAOS-00000000")


def test_after_calls_and_times(tmp_path):
    state = _state(tmp_path, "  - id: egress.credential_401\n    match: {host: '*.github.test'}\n"
                             "    after_calls: 2\n    times: 1\n")
    hits = []
    for _ in range(5):
        hit = state.consider(["egress.credential_401"], Target(host="api.github.test"))
        if hit:
            hit.applied(status=401)
        hits.append(hit is not None)
    assert hits == [False, False, True, False, False]
    assert state.consider(["egress.credential_401"], Target(host="github.test")) is None  # no suffix match
    (ev,) = read_events(tmp_path / "ev.jsonl").of_type("fault_injected")
    assert ev["ordinal"] == 2 and ev["canary"] == "E-CHAOS-00000000" and ev["status"] == 401


def test_probability_is_deterministic_and_recorded(tmp_path):
    faults = "  - id: llm.rate_limit\n    probability: 0.5\n"
    a = _state(tmp_path / "a", faults, "seed: 11\n")
    b = _state(tmp_path / "b", faults, "seed: 11\n")
    seq_a = [a.consider(["llm.rate_limit"], Target(host="h", model="m")) is not None for _ in range(40)]
    seq_b = [b.consider(["llm.rate_limit"], Target(host="h", model="m")) is not None for _ in range(40)]
    assert seq_a == seq_b and 5 < sum(seq_a) < 35
    skipped = read_events(tmp_path / "a" / "ev.jsonl").of_type("fault_skipped")
    assert len(skipped) == 40 - sum(seq_a) and all(e["sampled"] >= 0.5 for e in skipped)


def test_max_faults_budget_records_unapplied(tmp_path):
    state = _state(tmp_path, "  - id: llm.rate_limit\n", "max_faults: 2\n")
    for _ in range(3):
        inj = state.consider(["llm.rate_limit"], Target(host="h"))
        if inj:
            inj.applied()
    events = read_events(tmp_path / "ev.jsonl")
    assert len(events.of_type("fault_injected")) == 2
    assert [e["reason"] for e in events.of_type("fault_skipped")] == ["max_faults"]


@pytest.mark.parametrize("without_pydantic", [False, True], ids=["pydantic", "json"])
def test_event_lines_read_back_by_every_reader(tmp_path, monkeypatch, without_pydantic):
    with monkeypatch.context() as patch:
        if without_pydantic:  # as in the gate's sandbox
            patch.setitem(sys.modules, "pydantic_core", None)
        writer = EventWriter(tmp_path / "ev.jsonl", "r", "proxy")
    texts = ["plain", "caf\u00e9 \u2603", "a\u2028b\u2029c\x85d", "lone \ud800", "ctl \x1c\n"]
    for text in texts:
        writer.emit("tool_result", error=text, path=Path("/w"), pair=(1, 2), nan=float("nan"))
    raw = (tmp_path / "ev.jsonl").read_text()
    by_lines = [json.loads(line) for line in raw.splitlines()]
    assert [e["error"] for e in by_lines] == texts
    assert by_lines == [json.loads(line) for line in raw.split("\n")[:-1]]
    assert [e["error"] for e in read_events(tmp_path / "ev.jsonl").events] == texts
    assert by_lines[0]["path"] == "/w" and by_lines[0]["pair"] == [1, 2] and by_lines[0]["nan"] != by_lines[0]["nan"]


def test_mitmdump_starts_with_shipped_plan_and_exits_cleanly_on_sigterm(tmp_path):
    port = free_port()
    proc = subprocess.Popen([mitmdump_binary(), "-q", "--listen-host", "127.0.0.1", "-p", str(port),
                             "--set", f"confdir={tmp_path}/conf", "-s", str(ROOT / "addons" / "chaos.py"),
                             "--set", f"chaos_plan={ROOT / 'plans' / 'registry-down.yaml'}",
                             "--set", f"chaos_events={tmp_path / 'ev.jsonl'}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline and not (tmp_path / "ev.jsonl").exists():
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0, out
    (loaded,) = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    assert loaded["plan"] == "registry-down"


@pytest.mark.parametrize("option,message", [
    ("chaos_plna=x", "unknown mitmchaos option(s): chaos_plna"),
    ("chaos_plan=/nonexistent.yaml", "/nonexistent.yaml:1:1: no such file"),
])
def test_mitmdump_refuses_to_start_on_bad_chaos_options(tmp_path, option, message):
    out = subprocess.run([mitmdump_binary(), "-q", "-p", str(free_port()), "--set", f"confdir={tmp_path}/conf",
                          "-s", str(addon_script()), "--set", option],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert message in out.stdout + out.stderr


def test_options_are_documented_in_mitmdump_options(tmp_path):
    out = subprocess.run([mitmdump_binary(), "--set", f"confdir={tmp_path}/conf", "-s", str(addon_script()),
                          "--options"], capture_output=True, text=True, timeout=60)
    for name in ("chaos_plan", "chaos_events", "chaos_run_id", "chaos_canary", "chaos_seed"):
        assert name in out.stdout


def test_chaos_proxy_helper_starts_and_stops(tmp_path, plan_file):
    proxy = ChaosProxy(tmp_path / "p", plan_file(VALID_PLAN), "E-CHAOS-0123abcd", "r").start()
    try:
        assert proxy.ca_path.exists() and proxy.alive()
        assert proxy.events("plan_loaded")[0]["canary"] == "E-CHAOS-0123abcd"
    finally:
        assert proxy.stop() == 0


def test_suite_calls_every_hook_of_its_addons_in_order():
    """addons/chaos.py hands mitmdump one Suite: it must forward each hook any addon has, in list order."""
    import asyncio

    from mitmproxy import hooks

    from mitmchaos.addons import Suite, build_addons

    addons = build_addons()
    suite = Suite(addons)
    for hook in hooks.all_hooks:
        if any(callable(getattr(addon, hook, None)) for addon in addons):
            assert callable(getattr(suite, hook, None)), hook
        else:
            assert not hasattr(suite, hook), hook

    calls = []

    class Sync:
        def __init__(self, name):
            self.name = name

        def request(self, flow):
            calls.append((self.name, flow))

    class Async(Sync):
        async def request(self, flow):
            await asyncio.sleep(0)
            calls.append((self.name, flow))

    asyncio.run(Suite([Sync("a"), Async("b"), Sync("c")]).request("flow"))
    assert calls == [("a", "flow"), ("b", "flow"), ("c", "flow")]

    class Returns(Sync):  # a sync hook that returns an awaitable only when it has to wait
        def request(self, flow):
            return Async.request(self, flow)

    calls.clear()
    assert Suite([Sync("a"), Sync("b")]).request("flow") is None  # nothing to wait for: no coroutine
    pending = Suite([Sync("c"), Returns("d"), Sync("e")]).request("flow")
    assert calls == [("a", "flow"), ("b", "flow"), ("c", "flow")]  # the rest wait for d's awaitable
    asyncio.run(pending)
    assert calls[3:] == [("d", "flow"), ("e", "flow")]
    assert not hasattr(Suite([Sync("a")]), "response")
