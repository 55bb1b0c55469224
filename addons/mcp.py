"""McpTraffic: MCP over streamable HTTP — tool calls and results as events, and the tool faults.

Any POST whose body is a JSON-RPC 2.0 request is MCP traffic; answers come as JSON or as
SSE (streamed through, only the event carrying our answer is rewritten). ``tools/call``
requests and their results become tool_call / tool_result events (source ``mcp``). Faults:

- tool.error: answered by the proxy, the server never runs the tool: an ``isError`` result
  or a JSON-RPC error (``mcp_error``), with the canary.
- tool.latency: the call waits (seeded draw, within the latency budget) before going on.
- tool.stale_data, tool.corrupt, inject.tool_result: the tool runs; its result is replaced,
  damaged or extended on the way back (text blocks and structuredContent alike).
- mcp.toolset_change: from the matching call on, tools/list answers lose or redefine tools,
  calls to a removed tool get "Unknown tool", and a notifications/tools/list_changed is
  sent ahead of the answer when the client accepts SSE for it (see docs/tools.md).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from mitmchaos.addons.annotate import annotate
from mitmchaos.addons.headers import content, header, set_header
from mitmchaos.addons.faults.llm import draw_delay
from mitmchaos.addons.faults.mcp import ToolsetChangeOptions, change_toolset
from mitmchaos.addons.faults.tool import error_message, result_rewriters, stale_text
from mitmchaos.addons.providers.sse import SSEParser
from mitmchaos.addons.state import Injection, Target, pretty_host
from mitmchaos.tools import safe_input, tool_key
from mitmproxy import http

RESULT_FAULTS = ("tool.stale_data", "tool.corrupt", "inject.tool_result")
CALL_FAULTS = ("tool.error", "tool.latency", *RESULT_FAULTS)
TOOLSET = "mcp.toolset_change"
UNKNOWN_TOOL = -32602  # JSON-RPC invalid params, what MCP servers answer for an unknown tool
TOOL_FAILED = -32000  # JSON-RPC server error range
STATELESS_PROTOCOL = "2026-07-28"  # the first MCP version without sessions (dates compare as text)


@dataclass
class Exchange:
    """One JSON-RPC request in flight and what is to be done to its answer."""

    id: Any
    method: str
    session: str | None
    tool: str | None = None
    fault: Injection | None = None  # a result fault, applied on the way back ...
    flow: http.HTTPFlow | None = None  # ... and recorded on this flow
    notify: bool = False  # send tools/list_changed ahead of the answer
    answered: bool = False  # the proxy answered; the server never saw the call
    stateless: bool = False  # the 2026-07-28 protocol: results carry resultType

    def result(self, result: dict) -> dict:
        """A result the proxy makes up, in the form the client's protocol version expects."""
        return {**result, "resultType": "complete"} if self.stateless else result

    @property
    def call_id(self) -> str:
        return f"{self.session}/{self.id}" if self.session else str(self.id)


class McpTraffic:
    handles = (*CALL_FAULTS, TOOLSET)

    def __init__(self, core) -> None:
        self.core = core
        self.toolset: ToolsetChangeOptions | None = None  # the change in force, once injected
        self.exchanges: dict[str, Exchange] = {}  # flow id -> exchange; flow.metadata is saved with the flow
        self.tools_seen: set[str] = (
            set()
        )  # tool keys called over MCP here; faulted here, not at the model API

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        state = self.core.state
        if state is None or flow.response is not None:
            return None
        message = _jsonrpc_request(flow.request)
        if message is None or "id" not in message:
            return None
        ex = Exchange(
            message["id"],
            message.get("method", ""),
            header(flow.request.headers, "mcp-session-id", None),
            stateless=header(flow.request.headers, "mcp-protocol-version") >= STATELESS_PROTOCOL,
        )
        self.exchanges[flow.id] = ex
        # an SSE answer is rewritten as it passes, so it must come back uncompressed
        set_header(flow.request.headers, "accept-encoding", "identity")
        if ex.method != "tools/call":
            return None
        params = message.get("params") or {}
        ex.tool = str(params.get("name"))
        key = tool_key(ex.tool)
        self.tools_seen.add(key)
        self._emit("tool_call", ex, input=safe_input(params.get("arguments") or {}))
        if self.toolset is not None and ex.tool in self.toolset.remove:
            self._answer_error(flow, ex, UNKNOWN_TOOL, f"Unknown tool: {ex.tool}")
            return None
        target = Target(host=pretty_host(flow.request), tool=key)
        change = state.consider([TOOLSET], target, flow)
        if change is not None:
            self.toolset = change.options
            ex.notify = self.toolset.notify and "text/event-stream" in header(flow.request.headers, "accept")
            event = change.applied(
                removed=self.toolset.remove,
                redefined=sorted(self.toolset.redefine),
                notified=ex.notify,
                tool_call_id=ex.call_id,
            )
            annotate(
                flow, event, f"at {ex.tool}: removed {self.toolset.remove}, redefined {event['redefined']}"
            )
        inj = state.consider(CALL_FAULTS, target, flow)
        if inj is None:
            return None
        if inj.id == "tool.error":
            self._fail(flow, ex, inj)
        elif inj.id == "tool.latency":
            delay = draw_delay(inj.options, inj.rng())
            if state.grant_latency(inj, delay):
                event = inj.applied(delay_s=round(delay, 3), tool_call_id=ex.call_id)
                annotate(flow, event, f"{delay:.2f}s before {ex.tool}")
                return asyncio.sleep(delay)
        else:
            ex.fault, ex.flow = inj, flow
        return None

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if self.core.state is None or not _is_sse(flow.response):
            return
        ex = self.exchanges.get(flow.id)
        if ex is not None:
            flow.response.stream = SseAnswer(self, ex)
        elif header(flow.request.headers, "mcp-session-id", None) is not None:
            flow.response.stream = True  # a GET stream of server messages: pass it through live

    def response(self, flow: http.HTTPFlow) -> None:
        ex = self.exchanges.pop(flow.id, None)
        if self.core.state is None or ex is None or flow.response.stream or ex.answered:
            return
        try:
            message = json.loads(flow.response.get_text() or "")
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        messages = self.answer(ex, message)
        if len(messages) == 1:
            flow.response.set_text(json.dumps(messages[0]))
        else:  # a notification rides along: the answer becomes an SSE stream, which the client accepted
            flow.response.headers["content-type"] = "text/event-stream"
            flow.response.set_text("".join(_sse(m) for m in messages))

    def error(self, flow: http.HTTPFlow) -> None:
        self.exchanges.pop(flow.id, None)

    def answer(self, ex: Exchange, message: dict) -> list[dict]:
        """The messages the client gets for the server's answer ``message`` to ``ex``."""
        if message.get("id") != ex.id:
            return [message]
        result = message.get("result")
        if isinstance(result, dict):
            if ex.method == "initialize" and self._plans_toolset_notify():
                # so that clients listen for the list_changed the fault will send
                tools = result.setdefault("capabilities", {}).setdefault("tools", {})
                tools["listChanged"] = True
            elif ex.method == "tools/list" and self.toolset is not None:
                result["tools"] = change_toolset(result.get("tools") or [], self.toolset)
            elif ex.method == "tools/call":
                if ex.fault is not None:
                    message = {**message, "result": self._fault_result(ex, ex.fault, result)}
                self._emit_result(ex, message)
        elif ex.method == "tools/call":
            self._emit_result(ex, message)
        if ex.notify:
            return [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}, message]
        return [message]

    def _fault_result(self, ex: Exchange, inj: Injection, result: dict) -> dict:
        rewrite_text, rewrite_value, details = result_rewriters(inj)
        content = [
            {**b, "text": rewrite_text(b.get("text", ""))} if b.get("type") == "text" else b
            for b in result.get("content") or []
        ]
        if inj.id == "tool.stale_data" and not content:
            content = [{"type": "text", "text": stale_text(inj.options)}]
        result = {**result, "content": content}
        if isinstance(result.get("structuredContent"), dict):
            result["structuredContent"] = _as_object(
                rewrite_value(result["structuredContent"]), result["structuredContent"]
            )
        annotate(ex.flow, inj.applied(tool_call_id=ex.call_id, **details), f"{ex.tool}'s result rewritten")
        return result

    def _fail(self, flow: http.HTTPFlow, ex: Exchange, inj: Injection) -> None:
        text = error_message(inj.options, inj.canary)
        if inj.options.mcp_error == "jsonrpc":
            self._answer_error(flow, ex, TOOL_FAILED, text)
        else:
            result = {"content": [{"type": "text", "text": text}], "isError": True}
            self._answer(flow, ex, {"jsonrpc": "2.0", "id": ex.id, "result": ex.result(result)})
        event = inj.applied(
            mcp_error=inj.options.mcp_error, error_kind=inj.options.error_kind, tool_call_id=ex.call_id
        )
        annotate(flow, event, f"{ex.tool} failed ({inj.options.mcp_error})")

    def _answer_error(self, flow: http.HTTPFlow, ex: Exchange, code: int, text: str) -> None:
        self._answer(flow, ex, {"jsonrpc": "2.0", "id": ex.id, "error": {"code": code, "message": text}})

    def _answer(self, flow: http.HTTPFlow, ex: Exchange, message: dict) -> None:
        headers = {"content-type": "application/json"}
        if ex.session:
            headers["mcp-session-id"] = ex.session
        flow.response = http.Response.make(200, json.dumps(message), headers)
        ex.answered = True
        self._emit_result(ex, message)

    def _emit_result(self, ex: Exchange, message: dict) -> None:
        result, error = message.get("result"), message.get("error")
        if isinstance(error, dict):
            self._emit("tool_result", ex, ok=False, error=str(error.get("message"))[:500])
        elif isinstance(result, dict):
            failed = bool(result.get("isError"))
            text = " ".join(b.get("text", "") for b in result.get("content") or [] if isinstance(b, dict))
            self._emit("tool_result", ex, ok=not failed, error=text[:500] if failed else None)

    def _emit(self, type: str, ex: Exchange, **fields) -> None:
        self.core.state.events.emit(
            type,
            tool=ex.tool,
            tool_key=tool_key(ex.tool),
            call_id=ex.call_id,
            source="mcp",
            session=ex.session,
            **fields,
        )

    def _plans_toolset_notify(self) -> bool:
        return any(f.options().notify for _, f in self.core.state.faults_of([TOOLSET]))


class SseAnswer:
    """Streams an SSE answer through, rewriting only the event that carries the JSON-RPC answer."""

    def __init__(self, addon: McpTraffic, ex: Exchange) -> None:
        self.addon = addon
        self.ex = ex
        self.parser = SSEParser()
        self.held = bytearray()

    def __call__(self, chunk: bytes) -> bytes:
        if not chunk:
            rest, self.held = bytes(self.held), bytearray()
            return rest
        start = len(self.held)
        self.held += chunk
        out = bytearray()
        done = 0
        for event, end in self.parser.feed(chunk):
            block = bytes(self.held[done : start + end])
            done = start + end
            message = event.json()
            if isinstance(message, dict) and "id" in message and ("result" in message or "error" in message):
                block = "".join(_sse(m) for m in self.addon.answer(self.ex, message)).encode()
            out += block
        del self.held[:done]
        return bytes(out)


def _jsonrpc_request(request: http.Request) -> dict | None:
    if request.method != "POST" or "json" not in header(request.headers, "content-type"):
        return None
    # Model API calls are JSON too and far bigger: skip the parse unless it can be JSON-RPC.
    if b'"jsonrpc"' not in (content(request, strict=True) or b""):
        return None
    try:
        message = json.loads(request.get_text() or "")
    except ValueError:
        return None
    if (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and isinstance(message.get("method"), str)
    ):
        return message
    return None


def _is_sse(response: http.Response | None) -> bool:
    return response is not None and "text/event-stream" in header(response.headers, "content-type")


def _sse(message: dict) -> str:
    return f"event: message\ndata: {json.dumps(message)}\n\n"


def _as_object(value: Any, original: dict) -> dict:
    """structuredContent must stay an object: a non-object fills the SDK's ``{"result": ...}`` wrapper."""
    if isinstance(value, dict):
        return value
    return {"result": value} if set(original) == {"result"} else {}
