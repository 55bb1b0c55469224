"""End to end: a real proxy with the addons (`mitmchaos proxy`; some tests under mitmdump -s as
well), the official SDKs, and a local fake model upstream (runner/model_server.py) streaming
with chunked encoding. Loopback only."""

import json
import time

import anthropic
import httpx2
import openai
import pytest
from mitmproxy import io

from mitmchaos.model_server import ModelServer, ToolUse, Turn
from mitmchaos.proxy import free_port
from tests.clients import claude, gpt, trust

pytestmark = pytest.mark.slow

MODEL = "claude-sonnet-4-6"
MESSAGES = [{"role": "user", "content": "hi"}]


def plan(*faults, **extra) -> dict:
    return {
        "name": "t",
        "agent": "true",
        "verify": "true",
        "faults": list(faults),
        "probes": [{"id": "task_success"}],
        "abort": [{"cost_usd_above": 1}],
        **extra,
    }


@pytest.fixture
def upstream():
    with ModelServer() as server:
        yield server


def nowhere() -> str:
    """An HTTPS base URL on a closed loopback port: only answers made in the proxy can reach the client."""
    return f"https://127.0.0.1:{free_port()}"


def types(proxy) -> list[str]:
    return [e["type"] for e in proxy.events()]


HOSTS = pytest.mark.parametrize("via_mitmdump", [False, True], ids=["mitmchaos-proxy", "mitmdump-s"])


@HOSTS
def test_rate_limit_over_https_honours_retry_after_and_carries_the_canary(chaos_proxy, via_mitmdump):
    proxy = chaos_proxy(plan({"id": "llm.rate_limit", "retry_after_s": 1}), via_mitmdump=via_mitmdump)
    started = time.monotonic()
    with pytest.raises(anthropic.RateLimitError) as raised:
        claude(proxy, nowhere(), max_retries=1).messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert time.monotonic() - started >= 1.0  # the SDK waited retry-after once
    assert proxy.canary in str(raised.value)
    with pytest.raises(openai.RateLimitError) as raised:
        gpt(proxy, nowhere() + "/v1").chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert proxy.canary in str(raised.value)
    assert types(proxy) == ["plan_loaded"] + ["fault_injected", "llm_call"] * 3
    calls = proxy.wait_events("llm_call", 3)
    assert [c["retry_count"] for c in calls] == [0, 1, 0]
    assert [c["provider"] for c in calls] == ["anthropic", "anthropic", "openai-chat"]
    assert all(c["status"] == 429 and c["faulted"] == "llm.rate_limit" for c in calls)


@pytest.mark.parametrize(
    "status,anthropic_error,openai_error",
    [
        (529, anthropic.OverloadedError, openai.InternalServerError),
        (500, anthropic.InternalServerError, openai.InternalServerError),
    ],
)
def test_upstream_5xx_raises_what_a_real_outage_raises(chaos_proxy, status, anthropic_error, openai_error):
    proxy = chaos_proxy(plan({"id": "llm.upstream_5xx", "status": status}))
    with pytest.raises(anthropic_error) as raised:
        claude(proxy, nowhere()).messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert proxy.canary in str(raised.value) and raised.value.status_code == status
    with pytest.raises(openai_error) as raised:
        gpt(proxy, nowhere() + "/v1").responses.create(model="gpt-5", input="hi")
    assert proxy.canary in str(raised.value)


def test_reset_stream_cut_raises_a_connection_error_and_the_fallback_meets_the_fault(chaos_proxy, upstream):
    proxy = chaos_proxy(
        plan(
            {
                "id": "llm.upstream_5xx",
                "match": {"model": "claude-*"},
                "status": 503,
                "stream_cut_after_chunks": 4,
                "times": 2,
            },
            {"id": "llm.upstream_5xx", "match": {"model": "gpt-*"}, "stream_cut_after_chunks": 2},
        )
    )
    client = claude(proxy, upstream.url)
    received = []
    with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)):
        with client.messages.stream(model=MODEL, max_tokens=10, messages=MESSAGES) as stream:
            received.extend(stream.text_stream)
    assert "".join(received) == "Hello "  # message_start, content_block_start, ping, first delta
    with pytest.raises(anthropic.InternalServerError) as raised:  # a non-stream retry, as Claude Code does
        client.messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert raised.value.status_code == 503 and proxy.canary in str(raised.value)
    assert (
        client.messages.create(model=MODEL, max_tokens=10, messages=MESSAGES).content[0].text
    )  # times spent
    with pytest.raises(openai.APIConnectionError):
        list(
            gpt(proxy, upstream.url + "/v1").chat.completions.create(
                model="gpt-4o", messages=MESSAGES, stream=True
            )
        )
    cut, fallback, openai_cut = proxy.events("fault_injected")
    assert openai_cut["fault_index"] == 1 and openai_cut["cut_mode"] == "reset"
    assert (cut["cut_after_chunks"], cut["cut_mode"], fallback["status"]) == (4, "reset", 503)
    first = proxy.wait_events("llm_call")[0]
    assert (
        first["stream"]
        and first["error"] == "stream cut after 4 chunks (reset)"
        and first["stop_reason"] is None
    )


def test_silent_stream_cut_returns_partial_text_without_error(chaos_proxy, upstream):
    proxy = chaos_proxy(plan({"id": "llm.upstream_5xx", "stream_cut_after_chunks": 5, "cut_mode": "silent"}))
    with claude(proxy, upstream.url).messages.stream(model=MODEL, max_tokens=10, messages=MESSAGES) as stream:
        message = stream.get_final_message()
    assert message.content[0].text == "Hello from " and message.stop_reason is None
    stream = gpt(proxy, upstream.url + "/v1").chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Hello from the model "  # role chunk + 4 words: no finish_reason, no error
    assert [e["cut_mode"] for e in proxy.events("fault_injected")] == ["silent", "silent"]


def test_trim_and_degrade_change_what_the_upstream_receives(chaos_proxy, upstream):
    proxy = chaos_proxy(
        plan({"id": "llm.context_trim", "drop_oldest": 2, "drop_system": True}, {"id": "llm.model_degrade"})
    )
    history = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    message = claude(proxy, upstream.url).messages.create(
        model="claude-opus-4-8", max_tokens=10, system="rules", messages=history
    )
    (received,) = upstream.bodies("anthropic")
    assert received["messages"] == [{"role": "user", "content": "three"}] and "system" not in received
    assert received["model"] == "claude-haiku-4-5" and message.model == "claude-haiku-4-5"
    (call,) = proxy.wait_events("llm_call")
    assert (call["requested_model"], call["model"]) == ("claude-opus-4-8", "claude-haiku-4-5")


def test_timeout_hangs_until_the_client_gives_up(chaos_proxy):
    proxy = chaos_proxy(plan({"id": "llm.timeout", "hang_s": 30}))
    started = time.monotonic()
    with pytest.raises(anthropic.APITimeoutError):
        claude(proxy, nowhere(), timeout=1.0).messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert 1.0 <= time.monotonic() - started < 2.5
    time.sleep(0.5)  # the proxy notices the agent gave up and drops the call
    (injected,) = proxy.events("fault_injected")
    (call,) = proxy.wait_events("llm_call")
    assert injected["hang_s"] == 30 and call["status"] is None and call["error"].startswith("timeout: held 1.")
    assert 1.0 <= call["duration_s"] < 2


def test_timeout_is_bounded_by_hang_s(chaos_proxy):
    proxy = chaos_proxy(plan({"id": "llm.timeout", "hang_s": 1}))
    started = time.monotonic()
    with pytest.raises(anthropic.APIConnectionError):
        claude(proxy, nowhere(), timeout=10.0).messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert 1.0 <= time.monotonic() - started < 3


def test_latency_delays_the_response_start(chaos_proxy, upstream):
    proxy = chaos_proxy(plan({"id": "llm.latency", "delay_s": 0.6}))
    started = time.monotonic()
    claude(proxy, upstream.url).messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    assert time.monotonic() - started >= 0.6
    (injected,) = proxy.events("fault_injected")
    assert injected["delay_s"] == 0.6 and injected["per_chunk"] is False


def test_per_chunk_latency_stalls_the_stream(chaos_proxy):
    proxy = chaos_proxy(plan({"id": "llm.latency", "delay_s": 0.25, "per_chunk": True}))
    with ModelServer(chunk_delay_s=0.1) as slow:  # 12 events over about 1.2 s
        arrivals = []
        started = time.monotonic()
        with claude(proxy, slow.url).messages.stream(model=MODEL, max_tokens=10, messages=MESSAGES) as stream:
            for _ in stream.text_stream:
                arrivals.append(time.monotonic() - started)
    (injected,) = proxy.events("fault_injected")
    assert injected["per_chunk"] and injected["chunks_delayed"] >= 3
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert max(gaps) >= 0.2  # the agent saw the stream stall


def test_responses_tool_calls_and_results_become_events(chaos_proxy):
    def brain(body, provider):
        outputs = [
            i for i in body["input"] if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if outputs:
            return Turn(text="finished", input_tokens=200, cache_read_tokens=100)
        return Turn(tool_calls=[ToolUse("exec_command", {"cmd": "ls"}, id="call_9")], input_tokens=120)

    proxy = chaos_proxy(plan({"id": "llm.rate_limit", "match": {"model": "never"}}))
    with ModelServer(brain) as server:
        client = gpt(proxy, server.url + "/v1")
        with client.responses.stream(
            model="gpt-5-codex", input=[{"role": "user", "content": "list"}]
        ) as stream:
            call = [i for i in stream.get_final_response().output if i.type == "function_call"][0]
        client.responses.create(
            model="gpt-5-codex",
            input=[
                {"role": "user", "content": "list"},
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                },
                {"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"},
            ],
        )
    assert types(proxy) == ["plan_loaded", "tool_call", "llm_call", "tool_result", "llm_call"]
    (tool_call,) = proxy.events("tool_call")
    assert tool_call["tool"] == "exec_command" and tool_call["input"] == {"cmd": "ls"}
    (tool_result,) = proxy.events("tool_result")
    assert tool_result["call_id"] == "call_9" and tool_result["tool"] == "exec_command" and tool_result["ok"]
    first, second = proxy.wait_events("llm_call", 2)
    assert first["stream"] and first["stop_reason"] == "completed" and first["usage"]["input_tokens"] == 120
    assert second["usage"]["cache_read_tokens"] == 100 and second["cost_usd"] > 0


def test_saved_flows_hold_no_secrets_and_carry_the_comment(chaos_proxy, upstream, tmp_path):
    saved = tmp_path / "flows.mitm"
    proxy = chaos_proxy(plan({"id": "llm.rate_limit", "times": 1}), save_stream_file=str(saved))
    client = claude(proxy, upstream.url, default_headers={"x-api-key": "sk-ant-SECRET", "cookie": "s=SECRET"})
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    client.messages.create(model=MODEL, max_tokens=10, messages=MESSAGES)
    (sent,) = upstream.received
    assert sent.headers["Authorization"] == "Bearer sk-ant-SECRET"  # upstream got the real key
    proxy.stop()
    with open(saved, "rb") as fh:
        flows = list(io.FlowReader(fh).stream())
    assert len(flows) == 2 and b"SECRET" not in saved.read_bytes()
    faulted, passed = flows
    assert "llm.rate_limit" in faulted.comment and proxy.canary in faulted.comment and faulted.marked
    assert faulted.metadata["mitmchaos"]["faults"][0]["status"] == 429
    assert not passed.comment and json.loads(passed.response.content)["model"] == MODEL


def test_https_streams_are_parsed_and_cut_through_tls(chaos_proxy, upstream):
    # mitmproxy as a TLS-terminating reverse proxy for the loopback upstream: the SDK speaks HTTPS.
    proxy = chaos_proxy(plan({"id": "llm.upstream_5xx", "stream_cut_after_chunks": 6, "cut_mode": "silent"}),
                        mode=f"reverse:{upstream.url}")
    client = anthropic.Anthropic(base_url=f"https://127.0.0.1:{proxy.port}", api_key="sk-ant-SECRET",
                                 max_retries=0, http_client=anthropic.DefaultHttpxClient(verify=trust(proxy)))
    with client.messages.stream(model=MODEL, max_tokens=10, messages=MESSAGES) as stream:
        assert stream.get_final_message().content[0].text == "Hello from the "
    (call,) = proxy.wait_events("llm_call")
    assert call["model"] == MODEL and call["usage"]["input_tokens"] > 0 and call["error"].endswith("(silent)")


@HOSTS
@pytest.mark.parametrize("with_plan", [True, False])
def test_streams_reach_the_agent_as_they_arrive(chaos_proxy, with_plan, via_mitmdump):
    proxy = chaos_proxy(plan({"id": "llm.rate_limit", "match": {"model": "never"}}) if with_plan else None,
                        via_mitmdump=via_mitmdump)
    with ModelServer(chunk_delay_s=0.05) as slow:  # 9 text deltas, 50 ms apart
        client = claude(proxy, slow.url)
        with client.messages.stream(model=MODEL, max_tokens=10, messages=MESSAGES) as stream:
            arrivals = [time.monotonic() for _ in stream.text_stream]
    assert arrivals[-1] - arrivals[0] >= 0.25  # buffered, they would all arrive at once
    assert len(proxy.wait_events("llm_call", timeout=10 if with_plan else 0.5)) == (1 if with_plan else 0)
