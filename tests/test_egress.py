"""The egress policy and egress fault addons, hook by hook, with mitmproxy's test helpers."""

from __future__ import annotations

import json

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from mitmchaos.addons import build_addons
from mitmchaos.addons.faults.egress import credential_401_response, credential_provider
from mitmchaos.addons.state import BLOCKED
from mitmchaos.events import read_events
from tests.egress_support import client_env, run, write_plan

CANARY = "E-CHAOS-0badcafe"


@pytest.fixture
def chain(tmp_path):
    """``load(plan kwargs)`` -> (addons, events path): the shipped addon chain with a plan loaded."""
    contexts = []

    def load(**plan):
        addons = build_addons()
        context = taddons.context(*addons)
        tctx = context.__enter__()
        contexts.append(context)
        tctx.configure(addons[0], chaos_plan=str(write_plan(tmp_path, **plan)),
                       chaos_events=str(tmp_path / "events.jsonl"), chaos_canary=CANARY)
        return addons, tmp_path / "events.jsonl"

    yield load
    for context in contexts:
        context.__exit__(None, None, None)


def connect(host: str, port: int = 443) -> http.HTTPFlow:
    return tflow.tflow(req=tutils.treq(method=b"CONNECT", host=host, port=port, path=b"",
                                       authority=f"{host}:{port}".encode(), headers=http.Headers()))


def request(host: str, scheme: str = "https", host_header: str | None = None) -> http.HTTPFlow:
    flow = tflow.tflow(req=tutils.treq(host=host, port=443 if scheme == "https" else 80,
                                       headers=http.Headers(host=host_header or host)))
    flow.request.scheme = scheme
    return flow


def hook(addons, name: str, flow) -> None:
    for addon in addons:
        if hasattr(addon, name):
            getattr(addon, name)(flow)


def test_enforced_policy_blocks_connect_and_plain_http_with_a_clear_403(chain):
    addons, events = chain(policy={"deny": ["*.evil.test"], "allow": ["*.test"]})
    blocked = connect("x.evil.test")
    hook(addons, "http_connect", blocked)
    assert blocked.response.status_code == 403 and blocked.metadata[BLOCKED]
    assert b"blocked x.evil.test" in blocked.response.content and b"deny:*.evil.test" in blocked.response.content
    outside = request("example.com", scheme="http")
    hook(addons, "requestheaders", outside)
    assert outside.response.status_code == 403 and b"not in the allow list" in outside.response.content
    allowed = connect("pypi.test")
    hook(addons, "http_connect", allowed)
    assert allowed.response is None and BLOCKED not in allowed.metadata
    decisions = read_events(events).of_type("decision")
    assert [(d["kind"], d["action"], d["mode"], d["host"], d["rule"]) for d in decisions] == [
        ("policy", "block", "enforce", "x.evil.test", "deny:*.evil.test"),
        ("policy", "block", "enforce", "example.com", "allow")]


def test_a_tunnel_to_an_allowed_host_cannot_carry_a_refused_host_header(chain):
    addons, _ = chain(policy={"deny": ["evil.test"]})
    fronted = request("good.test", host_header="evil.test")
    hook(addons, "requestheaders", fronted)
    assert fronted.response.status_code == 403 and fronted.metadata[BLOCKED]


def test_observe_mode_records_and_lets_the_call_through_where_faults_still_apply(chain):
    addons, events = chain(policy={"mode": "observe", "deny": ["pypi.test"]},
                           faults=[{"id": "egress.dns_fail", "match": {"host": "pypi.test"}}])
    flow = connect("pypi.test")
    hook(addons, "http_connect", flow)
    assert flow.response.status_code == 502 and BLOCKED not in flow.metadata
    log = read_events(events)
    assert [(d["action"], d["mode"]) for d in log.of_type("decision")] == [("observe", "observe")]
    assert [e["fault"] for e in log.of_type("fault_injected")] == ["egress.dns_fail"]


def test_a_blocked_flow_is_never_faulted(chain):
    addons, events = chain(policy={"deny": ["pypi.test"]},
                           faults=[{"id": "egress.dns_fail", "match": {"host": "pypi.test"}},
                                   {"id": "egress.credential_401", "match": {"host": "pypi.test"}}])
    for flow, name in ((connect("pypi.test"), "http_connect"), (request("pypi.test", "http"), "requestheaders")):
        hook(addons, name, flow)
        assert flow.response.status_code == 403
    assert not read_events(events).of_type("fault_injected")


def test_dns_fail_inside_a_tunnel_is_left_to_the_connect(chain):
    addons, events = chain(faults=[{"id": "egress.dns_fail", "match": {"host": "pypi.test"}, "after_calls": 1}])
    first = connect("pypi.test")
    hook(addons, "http_connect", first)  # call 0: skipped by after_calls, so the tunnel opens
    inner = request("pypi.test", scheme="https")
    hook(addons, "requestheaders", inner)
    assert first.response is None and inner.response is None
    plain = request("pypi.test", scheme="http")
    hook(addons, "requestheaders", plain)
    assert plain.response.status_code == 502
    assert plain.response.reason == f"DNS resolution failed: pypi.test: Name or service not known [{CANARY}]"
    (event,) = read_events(events).of_type("fault_injected")
    assert event["ordinal"] == 1 and event["canary"] == CANARY


@pytest.mark.parametrize("host, provider", [("api.anthropic.com", "anthropic"), ("api.openai.com", "openai"),
                                            ("api.github.com", "github"), ("git.example.test", "generic")])
def test_credential_provider_by_host(host, provider):
    assert credential_provider(host, "auto") == provider
    assert credential_provider(host, "openai") == "openai"


def test_credential_401_bodies_carry_the_canary_in_each_provider_shape():
    github = credential_401_response("api.github.com", "github", CANARY)
    assert json.loads(github.content)["message"].startswith("Bad credentials") and CANARY in github.text
    generic = credential_401_response("git.example.test", "generic", CANARY)
    assert generic.status_code == 401 and 'error="invalid_token"' in generic.headers["WWW-Authenticate"]
    assert CANARY in generic.text


def test_credential_401_honours_after_calls_and_the_plan_provider(chain):
    addons, events = chain(faults=[{"id": "egress.credential_401", "match": {"host": "*.corp.test"},
                                    "after_calls": 2, "provider": "github"}])
    statuses = []
    for _ in range(4):
        flow = request("api.corp.test")
        hook(addons, "requestheaders", flow)
        statuses.append(flow.response.status_code if flow.response else None)
    assert statuses == [None, None, 401, 401]
    assert {e["provider"] for e in read_events(events).of_type("fault_injected")} == {"github"}


def test_enforced_policy_through_a_real_proxy(chaos_proxy, tmp_path):
    proxy = chaos_proxy(write_plan(tmp_path, policy={"allow": ["pypi.test"]}))
    result = run(["curl", "-sS", "-i", "http://elsewhere.test/"], client_env(proxy))
    assert "403 Blocked by egress policy: elsewhere.test (allow)" in result.stdout
    assert "elsewhere.test is not in the allow list" in result.stdout
    (decision,) = proxy.events("decision")
    assert (decision["action"], decision["mode"], decision["component"]) == ("block", "enforce", "proxy")
