"""The shipped pytest plugin: the marker, the fixtures and the event assertions."""

import pytest

from mitmchaos.assertions import Expect

PLAN = {
    "name": "plugin-test",
    "agent": "true",
    "verify": "true",
    "faults": [{"id": "llm.rate_limit", "retry_after_s": 1}],
    "probes": [{"id": "task_success"}],
    "abort": [{"cost_usd_above": 1}],
}


@pytest.mark.chaos_plan(PLAN)
def test_marker_starts_proxy_under_plan(chaos):
    assert chaos.alive() and chaos.ca_path.exists()
    (loaded,) = chaos.events("plan_loaded")
    assert loaded["plan"] == "plugin-test" and loaded["canary"] == chaos.canary
    chaos.expect().no_fault_fired()


def test_expect_reports_what_was_there_instead():
    events = [{"type": "llm_call", "status": 200}, {"type": "fault_injected", "fault": "llm.rate_limit"},
              {"type": "tool_result", "tool": "Bash", "ok": False}]
    expect = Expect(events)
    assert expect.fault_fired("llm.rate_limit", times=1)
    with pytest.raises(AssertionError, match="type=llm_call, status=200"):
        expect.llm_call(status=429)
    with pytest.raises(AssertionError, match="no successful tool result for Bash"):
        expect.recovered_after_fault(tool="Bash")
    events.append({"type": "tool_result", "tool": "Bash", "ok": True})
    assert Expect(events).recovered_after_fault(tool="Bash")["ok"]


def test_chaos_fixture_without_marker_is_a_usage_error(pytester):
    pytester.makepyfile("def test_x(chaos):\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*needs @pytest.mark.chaos_plan(plan)*"])
