"""ModelAPI, the ToolLedger and Redact with mitmproxy's test helpers (no network)."""

import asyncio
import json

import pytest
import yaml
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from mitmchaos.addons.annotate import METADATA_KEY
from mitmchaos.addons.core import ChaosCore
from mitmchaos.addons.ledger import ToolLedger
from mitmchaos.addons.model_api import ModelAPI
from mitmchaos.addons.redact import Redact
from mitmchaos.events import read_events
from mitmchaos.model_server import Reply as WireReply
from mitmchaos.model_server import ToolUse, Turn

CANARY = "E-CHAOS-0123abcd"
OBSERVE_ONLY = {"id": "llm.rate_limit", "match": {"host": "never.test"}}  # a plan needs a fault


def plan(*faults, **extra) -> dict:
    return {
        "name": "t",
        "agent": "true",
        "verify": "true",
        "faults": list(faults) or [OBSERVE_ONLY],
        "probes": [{"id": "task_success"}],
        "abort": [{"cost_usd_above": 1}],
        **extra,
    }


@pytest.fixture
def proxy_addons(tmp_path):
    """(core, model_api, events path) for a plan dict, inside a taddons context."""
    contexts = []

    def start(plan_dict: dict):
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump(plan_dict))
        core = ChaosCore()
        api = ModelAPI(core, ToolLedger(core))
        core.components = [api]
        context = taddons.context(core, api)
        tctx = context.__enter__()
        contexts.append(context)
        tctx.configure(
            core, chaos_plan=str(path), chaos_events=str(tmp_path / "ev.jsonl"), chaos_canary=CANARY
        )
        return core, api, tmp_path / "ev.jsonl"

    yield start
    for context in contexts:
        context.__exit__(None, None, None)


def model_flow(body: dict, path: str = "/v1/messages?beta=true", **headers) -> http.HTTPFlow:
    request = tutils.treq(method=b"POST", path=path.encode(), content=json.dumps(body).encode())
    request.headers.update({"authorization": "Bearer sk-ant-SECRET", **headers})
    return tflow.tflow(req=request, resp=False)


def run(result) -> None:
    """Await what a hook returned, as mitmproxy does (a hook with nothing to wait for returns None)."""

    async def settle():
        if result is not None:
            await result

    asyncio.run(settle())


def events(path, type):
    return read_events(path).of_type(type)


def answer(api: ModelAPI, flow, turn: Turn, provider: str = "anthropic") -> None:
    """Play the upstream: a JSON reply for ``flow``'s request."""
    body = json.loads(flow.request.get_text())
    flow.response = tutils.tresp(content=json.dumps(WireReply(turn, body, provider).json()).encode())
    flow.response.headers["content-type"] = "application/json"
    run(api.responseheaders(flow))
    api.response(flow)


def test_rate_limit_is_answered_in_the_providers_format_and_annotated(proxy_addons):
    _, api, ev = proxy_addons(plan({"id": "llm.rate_limit", "retry_after_s": 1.5}))
    flow = model_flow(
        {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "hi"}]},
        **{"x-stainless-retry-count": "2"},
    )
    run(api.request(flow))
    response = flow.response
    assert response.status_code == 429 and response.headers["retry-after"] == "2"
    assert (
        response.headers["retry-after-ms"] == "1500"
        and "anthropic-ratelimit-requests-reset" in response.headers
    )
    assert json.loads(response.content)["error"]["type"] == "rate_limit_error" and CANARY in response.text
    assert CANARY in flow.comment and "llm.rate_limit" in flow.comment and flow.marked
    (record,) = flow.metadata[METADATA_KEY]["faults"]
    assert record["fault"] == "llm.rate_limit" and record["retry_after_s"] == 1.5
    api.response(flow)
    (call,) = events(ev, "llm_call")
    assert call["status"] == 429 and call["faulted"] == "llm.rate_limit" and call["retry_count"] == 2
    assert call["path"] == "/v1/messages" and call["provider"] == "anthropic" and CANARY in call["error"]


def test_upstream_5xx_529_is_anthropic_overloaded_and_openai_gets_its_own_body(proxy_addons):
    _, api, _ = proxy_addons(plan({"id": "llm.upstream_5xx", "status": 529}))
    anthropic_flow = model_flow({"model": "claude-sonnet-4-6", "messages": []})
    openai_flow = model_flow({"model": "gpt-4o", "messages": []}, path="/v1/chat/completions")
    for flow in (anthropic_flow, openai_flow):
        run(api.request(flow))
    assert json.loads(anthropic_flow.response.content)["error"]["type"] == "overloaded_error"
    assert json.loads(openai_flow.response.content)["error"]["type"] == "server_error"
    assert anthropic_flow.response.status_code == openai_flow.response.status_code == 529


def test_stream_cut_waits_for_the_stream_but_a_non_stream_retry_gets_the_status(proxy_addons):
    _, api, ev = proxy_addons(plan({"id": "llm.upstream_5xx", "stream_cut_after_chunks": 3, "status": 503}))
    streamed = model_flow({"model": "m", "stream": True, "messages": []})
    run(api.request(streamed))
    assert streamed.response is None and api.calls[streamed.id].cut is not None
    fallback = model_flow({"model": "m", "messages": []})
    run(api.request(fallback))
    assert fallback.response.status_code == 503


def test_trim_and_degrade_rewrite_what_goes_upstream(proxy_addons):
    _, api, ev = proxy_addons(
        plan(
            {"id": "llm.context_trim", "drop_oldest": 2, "drop_system": True},
            {"id": "llm.model_degrade", "to_model": {"openai": "gpt-4o-mini"}},
        )
    )
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
    }
    flow = model_flow(body, path="/v1/chat/completions")
    run(api.request(flow))
    sent = json.loads(flow.request.get_text())
    assert sent == {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "c"}]}
    answer(api, flow, Turn(text="ok"), "openai-chat")
    trim, degrade = events(ev, "fault_injected")
    assert trim["dropped_messages"] == 2 and trim["dropped_system"] is True
    assert (degrade["from_model"], degrade["to_model"]) == ("gpt-4o", "gpt-4o-mini")
    (call,) = events(ev, "llm_call")
    assert call["requested_model"] == "gpt-4o" and call["model"] == "gpt-4o-mini"  # the model that answered
    assert call["faulted"] == "llm.context_trim" and call["cost_usd"] > 0
    assert flow.comment.count("mitmchaos:") == 2


def test_degrade_without_a_mapping_for_the_provider_leaves_the_call_alone(proxy_addons):
    _, api, ev = proxy_addons(plan({"id": "llm.model_degrade", "to_model": {"openai": "gpt-4o-mini"}}))
    flow = model_flow({"model": "claude-opus-4-8", "messages": []})
    run(api.request(flow))
    assert json.loads(flow.request.get_text())["model"] == "claude-opus-4-8" and not events(
        ev, "fault_injected"
    )


def test_latency_budget_refuses_delays_beyond_it(proxy_addons):
    _, api, ev = proxy_addons(plan({"id": "llm.latency", "delay_s": 0.3}, latency_budget_s=0.5))
    for _ in range(2):
        run(api.request(model_flow({"model": "m", "messages": []})))
    (injected,) = events(ev, "fault_injected")
    (skipped,) = events(ev, "fault_skipped")
    assert injected["delay_s"] == 0.3 and skipped["reason"] == "latency_budget"


def test_seeded_latency_distribution_is_reproducible(proxy_addons):
    fault = {"id": "llm.latency", "delay_s": 0.05, "jitter_s": 0.04, "distribution": "uniform"}
    delays = []
    for _ in range(2):
        _, api, ev = proxy_addons(plan(fault, seed=7))
        run(api.request(model_flow({"model": "m", "messages": []})))
        delays.append(events(ev, "fault_injected")[-1]["delay_s"])
    assert delays[0] == delays[1] and 0.01 <= delays[0] <= 0.09 and delays[0] != 0.05


def test_answered_flows_are_counted_but_never_faulted(proxy_addons):
    _, api, ev = proxy_addons(plan({"id": "llm.rate_limit"}))
    flow = model_flow({"model": "claude-sonnet-4-6", "messages": []})
    flow.response = tutils.tresp(
        status_code=401, content=b'{"type":"error","error":{"type":"authentication_error"}}'
    )
    run(api.request(flow))
    api.response(flow)
    assert not events(ev, "fault_injected")
    (call,) = events(ev, "llm_call")
    assert (
        call["status"] == 401 and call["faulted"] is None and call["error"].startswith("authentication_error")
    )


def test_ledger_reports_calls_once_and_names_results(proxy_addons):
    core, api, ev = proxy_addons(plan())
    seen = []
    api.ledger.on_tool_call.append(lambda flow, call: seen.append(("call", call.name)))
    api.ledger.on_tool_result.append(lambda flow, result: seen.append(("result", result.id, result.ok)))
    first = model_flow({"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "go"}]})
    run(api.request(first))
    answer(
        api, first, Turn(tool_calls=[ToolUse("mcp__fs__write", {"path": "x", "api_key": "sk-1"}, id="t1")])
    )
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "mcp__fs__write", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "denied"}],
        },
    ]
    for extra in ([], [{"role": "assistant", "content": "retrying"}, {"role": "user", "content": "ok"}]):
        flow = model_flow({"model": "claude-sonnet-4-6", "messages": history + extra})
        run(api.request(flow))
        answer(api, flow, Turn(text="done"))
    (call,) = events(ev, "tool_call")
    assert call["tool"] == "mcp__fs__write" and call["tool_key"] == "write" and call["call_id"] == "t1"
    assert call["input"]["path"] == "x" and "sk-1" not in json.dumps(call)
    (result,) = events(ev, "tool_result")
    assert result["tool"] == "mcp__fs__write" and result["ok"] is False and result["error"] == "denied"
    assert seen == [("call", "mcp__fs__write"), ("result", "t1", False)]
    assert len(events(ev, "llm_call")) == 3


def test_redact_replaces_secrets_only_after_the_request_went_upstream():
    redact = Redact()
    flow = model_flow({"model": "m"}, **{"x-api-key": "sk-ant-SECRET", "cookie": "session=1"})
    flow.response = tutils.tresp()
    flow.response.headers["set-cookie"] = "session=2"
    with taddons.context(redact):
        assert not hasattr(redact, "request")  # what goes upstream is never touched
        redact.response(flow)
    assert "SECRET" not in str(flow.request.headers) and "session" not in str(flow.response.headers)
    assert flow.request.headers["authorization"] == "REDACTED"
    errored = model_flow({"model": "m"})
    redact.error(errored)
    assert errored.request.headers["authorization"] == "REDACTED"
