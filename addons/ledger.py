"""ToolLedger: turns the tool calls a model asks for, and the results the agent sends back,
into ``tool_call`` and ``tool_result`` events, and remembers call id -> tool name.

Subscribing: append a callable to ``on_tool_call`` or ``on_tool_result``.

- ``on_tool_call(flow, call)`` runs as soon as a call is complete in the model's reply
  (mid-stream for SSE, before the rest of the stream reaches the agent). ``call`` is a
  ``providers.ToolCall`` (id, name, input). A destructive-command classifier plugs in here;
  it may stop the reply by setting ``flow.metadata[STOP_REPLY]`` to its reason: a stream is
  then cut before the event that completed the call, and the agent never receives its end.
- ``on_tool_result(flow, result)`` runs in the ``request`` hook of the next model call,
  before the request goes upstream, once per result (``providers.ToolResult``: id, ok,
  error, name), so a subscriber may still rewrite ``flow.request`` (tool-result faults).

Each request repeats the whole conversation, so a result is reported once, by call id.
"""

from __future__ import annotations

from collections.abc import Callable

from mitmproxy import http

from mitmchaos.addons.providers import ToolCall, ToolResult
from mitmchaos.tools import safe_input, tool_key


STOP_REPLY = "mitmchaos.stop_reply"


class ToolLedger:
    def __init__(self, core) -> None:
        self.core = core
        self.names: dict[str, str] = {}  # call id -> tool name
        self.reported: set[str] = set()  # call ids whose result was reported
        self.on_tool_call: list[Callable[[http.HTTPFlow, ToolCall], None]] = []
        self.on_tool_result: list[Callable[[http.HTTPFlow, ToolResult], None]] = []

    def call(self, flow: http.HTTPFlow, call: ToolCall) -> None:
        self.names[call.id] = call.name
        self._emit(
            "tool_call",
            tool=call.name,
            tool_key=tool_key(call.name),
            call_id=call.id,
            input=safe_input(call.input),
            source="model",
        )
        for subscriber in self.on_tool_call:
            subscriber(flow, call)

    def results(self, flow: http.HTTPFlow, results: list[ToolResult]) -> None:
        for result in results:
            if result.id in self.reported:
                continue
            self.reported.add(result.id)
            name = self.names.get(result.id) or result.name
            self._emit(
                "tool_result",
                tool=name,
                tool_key=tool_key(name),
                call_id=result.id,
                ok=result.ok,
                error=result.error,
                source="model",
            )
            for subscriber in self.on_tool_result:
                subscriber(flow, result)

    def _emit(self, type: str, **fields) -> None:
        if self.core.state is not None:
            self.core.state.events.emit(type, **fields)
