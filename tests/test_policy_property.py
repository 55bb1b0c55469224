"""The spec's invariant, over random plans and flows: a fault can fail, delay or change an
allowed call, and can never turn a call the egress policy blocks into an allowed one.

Runs every addon of the shipped chain (``build_addons``), so faults added later are covered.
"""

from __future__ import annotations

import inspect
import tempfile
from fnmatch import fnmatchcase
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from mitmchaos.addons import build_addons
from mitmchaos.addons.faults import REGISTRY
from mitmchaos.addons.state import BLOCKED
from mitmchaos.events import read_events
from mitmchaos.plan import FaultSpec
from tests.egress_support import write_plan

HOSTS = ["pypi.test", "a.pypi.test", "evil.test", "x.evil.test", "api.anthropic.test", "example.com"]
PATTERNS = HOSTS + ["*.pypi.test", "*.test", "*", "*.evil.test", "api.*"]


def _required_match(fault_id: str) -> dict:
    return {"tool": "*"} if REGISTRY[fault_id].requires_tool else {}


def _valid_with_defaults(fault_id: str) -> bool:
    try:
        TypeAdapter(FaultSpec).validate_python({"id": fault_id, "match": {"host": "h", **_required_match(fault_id)}})
    except ValidationError:
        return False  # needs options of its own; the invariant does not depend on them
    return True


# the fault ids the proxy's addons inject (every addon of the chain, present and future)
PROXY_FAULTS = sorted(fid for addon in build_addons() for fid in getattr(addon, "handles", ())
                      if _valid_with_defaults(fid))


@st.composite
def faults(draw):
    fault_id = draw(st.sampled_from(PROXY_FAULTS))
    match = _required_match(fault_id)
    if REGISTRY[fault_id].requires_host or draw(st.booleans()):
        match["host"] = draw(st.sampled_from(PATTERNS))
    return {"id": fault_id, "match": match, "after_calls": draw(st.integers(0, 2)),
            "probability": draw(st.sampled_from([1.0, 0.5, 0.0]))}


policies = st.fixed_dictionaries({
    "mode": st.sampled_from(["enforce", "observe"]),
    "allow": st.lists(st.sampled_from(PATTERNS), max_size=3),
    "deny": st.lists(st.sampled_from(PATTERNS), max_size=3),
})
calls = st.tuples(st.sampled_from(["connect", "http", "https"]), st.sampled_from(HOSTS), st.sampled_from(HOSTS))


def refused(policy: dict, host: str) -> bool:
    """The policy's rule, written independently of the addon: deny wins; a non-empty allow list is exhaustive."""
    if any(fnmatchcase(host, p) for p in policy["deny"]):
        return True
    return bool(policy["allow"]) and not any(fnmatchcase(host, p) for p in policy["allow"])


def make_flow(kind: str, host: str, host_header: str) -> http.HTTPFlow:
    if kind == "connect":
        return tflow.tflow(req=tutils.treq(method=b"CONNECT", host=host, port=443, path=b"",
                                           authority=f"{host}:443".encode(), headers=http.Headers()))
    flow = tflow.tflow(req=tutils.treq(host=host, port=443 if kind == "https" else 80, method=b"POST",
                                       headers=http.Headers(host=host_header, content_type="application/json"),
                                       content=b'{"model": "m", "messages": []}'))
    flow.request.scheme = kind
    return flow


def run_hooks(tctx, addons, flow: http.HTTPFlow) -> None:
    """The hooks mitmproxy would run, in order, with a 200 from 'upstream' if nobody answered."""
    names = ["http_connect"] if flow.request.method == "CONNECT" else ["requestheaders", "request"]
    if flow.request.method != "CONNECT":
        names += ["responseheaders", "response"]
    for name in names:
        if name == "responseheaders" and flow.response is None:
            flow.response = tutils.tresp(content=b'{"ok": true}')
        for addon in addons:
            if hasattr(addon, name):
                result = getattr(addon, name)(flow)
                if inspect.isawaitable(result):
                    tctx.master.event_loop.run_until_complete(result)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.none() | policies, fault_list=st.lists(faults(), min_size=1, max_size=4),
       call_list=st.lists(calls, min_size=1, max_size=8))
def test_faults_never_turn_a_block_into_an_allow(policy, fault_list, call_list):
    with tempfile.TemporaryDirectory() as tmp:
        addons = build_addons()
        with taddons.context(*addons) as tctx:
            events = Path(tmp) / "events.jsonl"
            tctx.configure(addons[0], chaos_plan=str(write_plan(Path(tmp), faults=fault_list, policy=policy)),
                           chaos_events=str(events))
            seen = 0
            for kind, host, host_header in call_list:
                flow = make_flow(kind, host, host_header)
                run_hooks(tctx, addons, flow)
                hosts = [host] if kind == "connect" else [host, host_header]
                blocked = (policy is not None and policy["mode"] == "enforce"
                           and any(refused(policy, h) for h in hosts))
                injected = read_events(events).of_type("fault_injected")[seen:]
                seen += len(injected)
                if blocked:
                    assert flow.metadata.get(BLOCKED) and flow.response.status_code == 403
                    assert b"mitmchaos egress policy: blocked" in flow.response.content
                    assert not injected, "a fault touched a blocked call"
                else:
                    assert not flow.metadata.get(BLOCKED)
                    assert flow.response is None or b"mitmchaos egress policy" not in flow.response.content
