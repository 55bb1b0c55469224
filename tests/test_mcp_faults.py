"""MCP tool faults end to end: the official SDK's server and client, streamable HTTP, through a real mitmdump."""

import asyncio
import json
import subprocess
import sys
import time

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mitmchaos.proxy import _listening, env_without_proxy_settings, free_port
from mitmproxy import io

from tests.conftest import ROOT

LOOKUP = {
    "sku": "A1",
    "name": "widget",
    "stock": 42,
    "price": 9.5,
    "tags": ["blue", "small"],
    "supplier": {"name": "Acme", "country": "NL"},
}


def plan(*faults) -> dict:
    return {
        "name": "mcp-test",
        "agent": "true",
        "verify": "true",
        "seed": 7,
        "faults": list(faults),
        "probes": [{"id": "failure_surfaced"}],
        "abort": [{"cost_usd_above": 1}],
    }


def start_server(*args) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp_server", str(port), *args],
        cwd=ROOT,
        env=env_without_proxy_settings(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not _listening("127.0.0.1", port):
        assert proc.poll() is None and time.monotonic() < deadline, "MCP server did not start"
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(scope="module")
def sse_server():
    proc, url = start_server()
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def json_server():
    proc, url = start_server("--json")
    yield url
    proc.terminate()
    proc.wait(10)


def session(proxy, url, script, **client_options):
    """Run ``script(client)`` with an MCP client whose HTTP goes through ``proxy``; returns its result."""

    async def main():
        async with (
            httpx2.AsyncClient(proxy=proxy.url, timeout=30, trust_env=False) as http,
            Client(streamable_http_client(url, http_client=http), **client_options) as client,
        ):
            return await script(client)

    return asyncio.run(main())


def text(result: types.CallToolResult) -> str:
    return result.content[0].text


def test_calls_and_results_become_events(chaos_proxy, sse_server):
    proxy = chaos_proxy(plan({"id": "tool.error", "match": {"tool": "not_this_one"}}))

    async def script(client):
        return await client.call_tool("lookup", {"sku": "A1"})

    result = session(proxy, sse_server, script)
    assert json.loads(text(result)) == LOOKUP and not result.is_error
    (call,) = proxy.events("tool_call")
    (res,) = proxy.events("tool_result")
    assert (call["tool"], call["tool_key"], call["source"], call["input"]) == (
        "lookup",
        "lookup",
        "mcp",
        {"sku": "A1"},
    )
    assert res["ok"] is True and res["call_id"] == call["call_id"]
    assert not proxy.events("fault_injected")


def test_error_stale_inject_and_latency_in_turn(chaos_proxy, sse_server, tmp_path):
    saved = tmp_path / "flows.mitm"
    proxy = chaos_proxy(
        plan(
            {"id": "tool.error", "match": {"tool": "lookup"}, "times": 1, "error_kind": "timeout"},
            {
                "id": "tool.error",
                "match": {"tool": "lookup"},
                "times": 1,
                "mcp_error": "jsonrpc",
                "message": "boom",
            },
            {
                "id": "tool.stale_data",
                "match": {"tool": "lookup"},
                "times": 1,
                "result": {"stock": 0, "as_of": "2023"},
            },
            {"id": "inject.tool_result", "match": {"tool": "read_file"}, "times": 1},
            {"id": "tool.latency", "match": {"tool": "lookup"}, "times": 1, "delay_s": 1.0},
        ),
        save_stream_file=str(saved),
    )
    canary = proxy.canary

    async def script(client):
        seen = {"error": await client.call_tool("lookup", {"sku": "A1"})}
        with pytest.raises(MCPError) as raised:
            await client.call_tool("lookup", {"sku": "A1"})
        seen["jsonrpc"] = raised.value
        seen["stale"] = await client.call_tool("lookup", {"sku": "A1"})
        seen["inject"] = await client.call_tool("read_file", {"path": "README.md"})
        started = time.monotonic()
        seen["slow"] = await client.call_tool("lookup", {"sku": "A1"})
        seen["slow_s"] = time.monotonic() - started
        seen["clean"] = await client.call_tool("lookup", {"sku": "A1"})
        return seen

    seen = session(proxy, sse_server, script)
    assert seen["error"].is_error and "timed out" in text(seen["error"]) and canary in text(seen["error"])
    assert "boom" in str(seen["jsonrpc"]) and canary in str(seen["jsonrpc"])
    assert json.loads(text(seen["stale"])) == {"stock": 0, "as_of": "2023"} and not seen["stale"].is_error
    injected = text(seen["inject"])
    assert injected.startswith("# README for README.md") and f"touch /tmp/{canary}" in injected
    assert f"touch /tmp/{canary}" in seen["inject"].structured_content["result"]
    assert seen["slow_s"] >= 1.0 and json.loads(text(seen["slow"])) == LOOKUP
    assert json.loads(text(seen["clean"])) == LOOKUP

    faults = proxy.events("fault_injected")
    assert [f["fault"] for f in faults] == [
        "tool.error",
        "tool.error",
        "tool.stale_data",
        "inject.tool_result",
        "tool.latency",
    ]
    assert [f.get("mcp_error") for f in faults[:2]] == ["result", "jsonrpc"]
    assert faults[4]["delay_s"] == 1.0
    results = proxy.events("tool_result")
    assert [r["ok"] for r in results] == [False, False, True, True, True, True]
    assert canary in results[0]["error"] and canary in results[1]["error"]
    assert [f["tool_call_id"] for f in faults] == [r["call_id"] for r in results[:5]]

    proxy.stop()
    with open(saved, "rb") as fh:  # mitmweb shows each faulted flow marked, commented with fault and canary
        marked = [f for f in io.FlowReader(fh).stream() if f.marked]
    assert [r["fault"] for f in marked for r in f.metadata["mitmchaos"]["faults"]] == [
        f["fault"] for f in faults
    ]
    assert all(canary in f.comment for f in marked)


def test_corruption_variants(chaos_proxy, sse_server):
    variants = [
        "empty_result",
        "missing_fields",
        "null_fields",
        "unexpected_nesting",
        "truncated_result",
        "corrupt_values",
    ]
    proxy = chaos_proxy(
        plan(
            *(
                {
                    "id": "tool.corrupt",
                    "match": {"tool": "lookup"},
                    "times": 1,
                    "variant": v,
                    "ratio": 0.5,
                    "max_length": 12,
                }
                for v in variants
            )
        )
    )

    async def script(client):
        return [text(await client.call_tool("lookup", {"sku": "A1"})) for _ in variants]

    empty, missing, nulls, nested, truncated, garbled = session(proxy, sse_server, script)
    assert json.loads(empty) == {}
    missing = json.loads(missing)
    assert missing != LOOKUP and set(missing) < set(LOOKUP)
    nulls = json.loads(nulls)
    assert None in nulls.values() or None in nulls["tags"] or None in nulls["supplier"].values()
    assert json.loads(nested) == {"data": {"result": LOOKUP}}
    assert truncated == json.dumps(LOOKUP, indent=2)[:12]
    garbled = json.loads(garbled)
    assert garbled.keys() == LOOKUP.keys() and garbled != LOOKUP
    assert [f["variant"] for f in proxy.events("fault_injected")] == variants


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # sessions (2025-11-25) and the stateless 2026-07-28
def test_toolset_change_mid_session(chaos_proxy, sse_server, mode):
    proxy = chaos_proxy(
        plan(
            {
                "id": "mcp.toolset_change",
                "match": {"tool": "lookup"},
                "after_calls": 1,
                "remove": ["delete_file"],
                "redefine": {"lookup": {"description": "Deprecated."}},
            }
        )
    )
    notified = []

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            notified.append(message)

    async def script(client):
        before = await client.list_tools()
        first = await client.call_tool("lookup", {"sku": "A1"})
        assert not notified
        second = await client.call_tool("lookup", {"sku": "A1"})  # the change happens here
        after = await client.list_tools()
        with pytest.raises(MCPError, match="Unknown tool: delete_file"):
            await client.call_tool("delete_file", {"path": "x"})
        return before, after, first, second

    before, after, first, second = session(proxy, sse_server, script, mode=mode, message_handler=on_message)
    assert json.loads(text(first)) == json.loads(text(second)) == LOOKUP
    assert {t.name for t in before.tools} == {"lookup", "read_file", "delete_file"}
    assert {t.name: t.description for t in after.tools} == {
        "lookup": "Deprecated.",
        "read_file": "The text of a file in the project.",
    }
    assert len(notified) == 1
    (fault,) = proxy.events("fault_injected")
    assert (
        fault["removed"] == ["delete_file"] and fault["redefined"] == ["lookup"] and fault["notified"] is True
    )
    assert proxy.events("tool_result")[-1] == {
        **proxy.events("tool_result")[-1],
        "tool": "delete_file",
        "ok": False,
    }


def test_json_answers_are_faulted_and_carry_the_notification_as_sse(chaos_proxy, json_server):
    proxy = chaos_proxy(
        plan(
            {"id": "mcp.toolset_change", "match": {"tool": "lookup"}, "remove": ["read_file"]},
            {
                "id": "tool.stale_data",
                "match": {"tool": "lookup"},
                "result": "stock unknown (cached 2023-01-01)",
            },
        )
    )
    notified = []

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            notified.append(message)

    async def script(client):
        result = await client.call_tool("lookup", {"sku": "A1"})
        return result, await client.list_tools()

    result, tools = session(proxy, json_server, script, mode="legacy", message_handler=on_message)
    assert text(result) == "stock unknown (cached 2023-01-01)"
    assert {t.name for t in tools.tools} == {"lookup", "delete_file"} and len(notified) == 1
    assert [f["fault"] for f in proxy.events("fault_injected")] == ["mcp.toolset_change", "tool.stale_data"]
