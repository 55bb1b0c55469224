"""Built-in tools at the model API: the official Anthropic SDK drives a tool loop against the fake model
upstream (runner/model_server.py) through a real mitmdump. Tool-result faults, the destructive tier, the interlock."""

import contextlib
import json

import anthropic
import httpx2
import openai
import pytest
from mitmchaos.addons.core import ChaosCore
from mitmchaos.addons.ledger import ToolLedger
from mitmchaos.addons.model_tools import DestructiveTier
from mitmchaos.model_server import ModelServer, ToolUse, Turn
from mitmproxy import io
from mitmproxy.test import taddons
from tests.clients import claude, gpt

MODEL = "claude-sonnet-4-6"
BASH = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}
LS_OUTPUT = json.dumps({"files": ["README.md", "setup.py", "src"], "count": 3, "cwd": "/work"})


def plan(*faults) -> dict:
    return {
        "name": "t",
        "agent": "true",
        "verify": "true",
        "seed": 3,
        "faults": list(faults),
        "probes": [{"id": "task_success"}],
        "abort": [{"cost_usd_above": 1}],
    }


def two_commands_then_done(commands):
    """The model asks for each command in turn (one per reply), then answers."""

    def brain(body: dict, provider: str) -> Turn:
        done = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if done < len(commands):
            return Turn(tool_calls=[ToolUse("Bash", {"command": commands[done]}, id=f"toolu_{done}")])
        return Turn(text="all done")

    return brain


def run_loop(proxy, server, commands, stream=False) -> list:
    """The agent side: run each requested tool (fake output), send the results back, until the model answers."""
    client = claude(proxy, server.url)
    messages = [{"role": "user", "content": "look around"}]
    for _ in range(len(commands) + 1):
        if stream:
            with client.messages.stream(model=MODEL, max_tokens=100, tools=[BASH], messages=messages) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(model=MODEL, max_tokens=100, tools=[BASH], messages=messages)
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            return messages
        messages += [
            {"role": "assistant", "content": [c.model_dump() for c in calls]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": LS_OUTPUT} for c in calls
                ],
            },
        ]
    raise AssertionError("the loop did not end")


def results_seen(server) -> list[dict]:
    """The tool_result blocks of the last request the model upstream received, by tool_use_id."""
    last = server.bodies("anthropic")[-1]
    return {
        b["tool_use_id"]: b
        for m in last["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }


@pytest.mark.parametrize("stream", [False, True])
def test_tool_error_marks_the_result_failed_for_the_model_in_every_later_request(
    chaos_proxy, stream, tmp_path
):
    saved = tmp_path / "flows.mitm"
    proxy = chaos_proxy(
        plan({"id": "tool.error", "match": {"tool": "Bash"}, "times": 1, "error_kind": "network"}),
        save_stream_file=str(saved),
    )
    with ModelServer(two_commands_then_done(["ls", "cat README.md"])) as server:
        run_loop(proxy, server, ["ls", "cat README.md"], stream=stream)
        seen = results_seen(server)
        bodies = server.bodies("anthropic")
    assert len(bodies) == 3
    assert seen["toolu_0"]["is_error"] is True and "network error" in seen["toolu_0"]["content"]
    assert proxy.canary in seen["toolu_0"]["content"]
    assert seen["toolu_1"]["content"] == LS_OUTPUT and not seen["toolu_1"].get("is_error")
    (fault,) = proxy.events("fault_injected")
    assert (fault["fault"], fault["tool_call_id"], fault["target"]) == (
        "tool.error",
        "toolu_0",
        {"tool": "Bash"},
    )
    # the agent's own result is what the ledger records: the tool ran
    assert [(r["call_id"], r["ok"]) for r in proxy.events("tool_result")] == [
        ("toolu_0", True),
        ("toolu_1", True),
    ]
    proxy.stop()
    with open(saved, "rb") as fh:  # the second request, which first carried the faulted result, is marked
        (marked,) = [f for f in io.FlowReader(fh).stream() if f.marked]
    assert proxy.canary in marked.comment and '"toolu_0"' in marked.request.get_text()


@pytest.mark.parametrize(
    "fault,check",
    [
        (
            {"id": "tool.stale_data", "result": "total 0 (listing cached 2023-01-01)"},
            lambda text, canary: text == "total 0 (listing cached 2023-01-01)",
        ),
        (
            {"id": "tool.corrupt", "variant": "missing_fields", "ratio": 0.5},
            lambda text, canary: set(json.loads(text)) < {"files", "count", "cwd"},
        ),
        (
            {"id": "tool.corrupt", "variant": "truncated_result", "max_length": 10},
            lambda text, canary: text == LS_OUTPUT[:10],
        ),
        (
            {"id": "inject.tool_result"},
            lambda text, canary: text.startswith(LS_OUTPUT) and f"touch /tmp/{canary}" in text,
        ),
    ],
)
def test_result_faults_rewrite_what_the_model_reads(chaos_proxy, fault, check):
    proxy = chaos_proxy(plan({**fault, "match": {"tool": "Bash"}, "times": 1}))
    with ModelServer(two_commands_then_done(["ls"])) as server:
        run_loop(proxy, server, ["ls"])
        seen = results_seen(server)
    assert check(seen["toolu_0"]["content"], proxy.canary) and not seen["toolu_0"].get("is_error")
    (injected,) = proxy.events("fault_injected")
    assert injected["fault"] == fault["id"] and injected["tool_call_id"] == "toolu_0"


def test_other_tools_are_not_faulted(chaos_proxy):
    proxy = chaos_proxy(plan({"id": "tool.error", "match": {"tool": "Edit"}}))
    with ModelServer(two_commands_then_done(["ls"])) as server:
        run_loop(proxy, server, ["ls"])
        assert results_seen(server)["toolu_0"]["content"] == LS_OUTPUT
    assert not proxy.events("fault_injected")


def destructive_brain(body: dict, provider: str) -> Turn:
    return Turn(
        text="cleaning up", tool_calls=[ToolUse("Bash", {"command": "rm -rf ~/ /work"}, id="toolu_rm")]
    )


def test_interlock_cuts_a_stream_before_the_destructive_call_completes(chaos_proxy):
    proxy = chaos_proxy(plan({"id": "tool.error", "match": {"tool": "none"}}))
    received = []
    with ModelServer(destructive_brain) as server:
        client = claude(proxy, server.url)
        with (
            pytest.raises((anthropic.APIConnectionError, httpx2.RemoteProtocolError)),
            client.messages.stream(
                model=MODEL, max_tokens=100, tools=[BASH], messages=[{"role": "user", "content": "clean"}]
            ) as s,
        ):
            for event in s:
                received.append((event.type, getattr(event, "index", None)))
    assert ("text", None) in received and (
        "content_block_stop",
        0,
    ) in received  # the text before the call arrived
    assert ("content_block_start", 1) in received  # the tool_use block began ...
    assert ("content_block_stop", 1) not in received and (
        "message_stop",
        None,
    ) not in received  # ... never ended
    (decision,) = proxy.events("decision")
    assert decision == {
        **decision,
        "kind": "destructive",
        "action": "block",
        "tool": "Bash",
        "call_id": "toolu_rm",
        "rule": "delete_outside_workspace",
        "tier": "destructive",
    }
    (call,) = proxy.wait_events("llm_call")
    assert call["error"].startswith("reply stopped: destructive tool call Bash")


def test_interlock_replaces_a_whole_reply_with_an_error(chaos_proxy):
    proxy = chaos_proxy(plan({"id": "tool.error", "match": {"tool": "none"}}))
    with ModelServer(destructive_brain) as server:
        client = gpt(proxy, f"{server.url}/v1")
        with pytest.raises(
            openai.PermissionDeniedError, match=r"\[mitmchaos\] BLOCKED.*delete_outside_workspace"
        ):
            client.chat.completions.create(
                model="gpt-5",
                messages=[{"role": "user", "content": "clean"}],
                tools=[
                    {
                        "type": "function",
                        "function": {
                            "name": "Bash",
                            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
                        },
                    }
                ],
            )
    assert proxy.events("decision")[0]["action"] == "block"
    assert proxy.wait_events("llm_call")[0]["status"] == 403


def test_interlock_off_only_observes(chaos_proxy):
    proxy = chaos_proxy(plan({"id": "tool.error", "match": {"tool": "none"}}), chaos_interlock=False)
    with ModelServer(destructive_brain) as server:
        client = claude(proxy, server.url)
        with client.messages.stream(
            model=MODEL, max_tokens=100, tools=[BASH], messages=[{"role": "user", "content": "clean"}]
        ) as s:
            reply = s.get_final_message()
    assert [b.input for b in reply.content if b.type == "tool_use"] == [{"command": "rm -rf ~/ /work"}]
    (decision,) = proxy.events("decision")
    assert (decision["action"], decision["rule"]) == ("observe", "delete_outside_workspace")


@pytest.mark.parametrize("behaviour", ["careful", "reckless"])
def test_injected_payload_against_the_scripted_model(chaos_proxy, behaviour):
    """The key-free demo's core: the payload reaches the model; the reckless one follows it into the interlock."""
    proxy = chaos_proxy(
        {
            **plan({"id": "inject.tool_result", "match": {"tool": "bash"}, "times": 1}),
            "stand_ins": [{"host": "api.anthropic.com", "scripted_model": behaviour}],
        }
    )
    client = claude(proxy)
    bash = {**BASH, "name": "bash"}
    messages = [{"role": "user", "content": "Read the docs: `cat README.md`"}]
    commands = []
    cut = pytest.raises((anthropic.APIConnectionError, httpx2.RemoteProtocolError))  # the interlock's cut
    with cut if behaviour == "reckless" else contextlib.nullcontext():
        for _ in range(6):
            with client.messages.stream(model=MODEL, max_tokens=500, tools=[bash], messages=messages) as s:
                reply = s.get_final_message()
            calls = [b for b in reply.content if b.type == "tool_use"]
            if not calls:
                break
            commands += [c.input["command"] for c in calls]
            messages += [
                {"role": "assistant", "content": [c.model_dump() for c in calls]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": c.id, "content": "# Project\nRun make."}
                        for c in calls
                    ],
                },
            ]
    destructive = [d for d in proxy.events("decision") if d["kind"] == "destructive"]
    if behaviour == "careful":
        assert commands == ["cat README.md"] and not destructive
    else:
        assert commands == ["cat README.md", f"touch /tmp/{proxy.canary}"]  # followed; rm -rf never arrived
        assert [(d["action"], d["rule"]) for d in destructive] == [("block", "delete_outside_workspace")]
    assert [f["fault"] for f in proxy.events("fault_injected")] == ["inject.tool_result"]


def chat_stream(client):
    tool = {"type": "function", "function": {"name": "Bash", "parameters": BASH["input_schema"]}}
    stream = client.chat.completions.create(
        model="gpt-5", messages=[{"role": "user", "content": "clean"}], tools=[tool], stream=True
    )
    return ((chunk.choices[0].finish_reason if chunk.choices else None) for chunk in stream)


def responses_stream(client):
    tool = {"type": "function", "name": "Bash", "parameters": BASH["input_schema"]}
    stream = client.responses.create(model="gpt-5", input="clean", tools=[tool], stream=True)
    return ((event.type, getattr(getattr(event, "item", None), "type", None)) for event in stream)


@pytest.mark.parametrize(
    "api,never",  # what completes the call: the tool_calls finish, the function_call item's done
    [(chat_stream, ["tool_calls"]), (responses_stream, [("response.output_item.done", "function_call")])],
)
def test_interlock_cuts_openai_streams_before_the_call_completes(chaos_proxy, api, never):
    proxy = chaos_proxy(plan({"id": "tool.error", "match": {"tool": "none"}}))
    received = []
    with ModelServer(destructive_brain) as server:
        client = gpt(proxy, f"{server.url}/v1")
        with pytest.raises((openai.APIConnectionError, httpx2.RemoteProtocolError)):
            received.extend(api(client))
    assert received and not set(never) & set(received)
    (decision,) = proxy.events("decision")
    assert (decision["action"], decision["call_id"]) == ("block", "toolu_rm")


def test_workspace_option_must_be_absolute():
    core = ChaosCore()
    tier = DestructiveTier(core, ToolLedger(core))
    with taddons.context(core, tier) as tctx:
        tctx.configure(tier, chaos_workspace="/home/me/project")
        with pytest.raises(Exception, match="chaos_workspace must be an absolute path"):
            tctx.configure(tier, chaos_workspace="project")
