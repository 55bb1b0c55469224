"""The shipped pytest plugin: the marker, the fixtures and the event assertions."""

import anthropic
import pytest

from mitmchaos.assertions import Expect
from mitmchaos.model_server import ModelServer

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


RATE_LIMITED_SECOND_CALL = {**PLAN, "faults": [{"id": "llm.rate_limit", "after_calls": 1, "times": 1}]}


@pytest.fixture
def model_upstream():
    with ModelServer() as server:
        yield server


@pytest.mark.chaos_plan(RATE_LIMITED_SECOND_CALL)
def test_official_sdk_meets_the_marker_plan(chaos, model_upstream):
    client = anthropic.Anthropic(base_url=model_upstream.url, api_key="sk-ant-test", max_retries=0,
                                 http_client=anthropic.DefaultHttpxClient(proxy=chaos.url))
    ask = {"model": "claude-sonnet-4-6", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    assert client.messages.create(**ask).content[0].text  # the first call reaches the model
    with pytest.raises(anthropic.RateLimitError) as raised:
        client.messages.create(**ask)
    assert chaos.canary in str(raised.value)
    expect = chaos.expect()
    (fired,) = expect.fault_fired("llm.rate_limit", times=1)
    assert fired["canary"] == chaos.canary
    expect.llm_call(status=200, times=1)
    expect.llm_call(status=429, times=1)
    assert len(model_upstream.received) == 1  # the faulted call never left the proxy


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
