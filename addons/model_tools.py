"""The agent's built-in tools (Bash, Edit, Write, ...), seen at the model API through the ToolLedger.

- DestructiveTier: every tool call the model asks for goes through the destructive-command
  classifier; a hit is a ``decision`` event (kind destructive). With ``chaos_interlock`` on,
  the reply carrying it never reaches the agent: a stream is cut before the event that
  completes the call, a whole (JSON) reply is replaced by an error. Nothing runs.
- ToolResultFaults: tool.error, tool.stale_data, tool.corrupt and inject.tool_result on a
  built-in tool. The tool ran; what the model reads in the next request is the faulted
  result (marked is_error for tool.error where the API has the flag), and every later
  request repeats the same faulted result, so the conversation stays consistent. An MCP
  tool whose traffic the proxy sees is faulted there instead (McpTraffic), never twice.
"""

from __future__ import annotations

import json

from mitmchaos.addons import providers
from mitmchaos.addons.annotate import annotate
from mitmchaos.addons.faults.tool import error_message, result_rewriters
from mitmchaos.addons.ledger import STOP_REPLY, ToolLedger
from mitmchaos.addons.mcp import McpTraffic
from mitmchaos.addons.state import Injection, Target
from mitmchaos.destructive import DEFAULT_WORKSPACE, classify_call
from mitmchaos.tools import tool_key
from mitmproxy import ctx, exceptions, http

RESULT_FAULTS = ("tool.error", "tool.stale_data", "tool.corrupt", "inject.tool_result")


class DestructiveTier:
    def __init__(self, core, ledger: ToolLedger) -> None:
        self.core = core
        ledger.on_tool_call.append(self.tool_call)

    def load(self, loader) -> None:
        loader.add_option(
            "chaos_interlock",
            bool,
            True,
            "Stop a model reply that carries a destructive tool call before it reaches the agent.",
        )
        loader.add_option(
            "chaos_workspace",
            str,
            DEFAULT_WORKSPACE,
            "The agent's workspace: relative paths resolve here; deletes outside it are destructive.",
        )

    def configure(self, updated: set[str]) -> None:
        if "chaos_workspace" in updated and not ctx.options.chaos_workspace.startswith("/"):
            raise exceptions.OptionsError(
                f"chaos_workspace must be an absolute path, not {ctx.options.chaos_workspace!r}"
            )

    def tool_call(self, flow: http.HTTPFlow, call: providers.ToolCall) -> None:
        state = self.core.state
        verdict = state and classify_call(call.name, call.input, ctx.options.chaos_workspace)
        if not verdict:
            return
        interlock = ctx.options.chaos_interlock
        state.events.emit(
            "decision",
            kind="destructive",
            action="block" if interlock else "observe",
            tool=call.name,
            call_id=call.id,
            **verdict.as_dict(),
        )
        if not interlock or flow.metadata.get(STOP_REPLY):
            return
        flow.metadata[STOP_REPLY] = f"destructive tool call {call.name} ({verdict.rule})"
        if not callable(flow.response.stream):  # a reply read whole: nothing was delivered yet
            provider = providers.detect(flow.request.method, flow.request.path)
            message = (
                f"[mitmchaos] BLOCKED: the model asked for a destructive tool call ({verdict.rule}: "
                f"{verdict.reason}); the reply was stopped before it reached the agent."
            )
            body, headers = provider.error(403, message)
            flow.response = http.Response.make(
                403, json.dumps(body), {"content-type": "application/json", **headers}
            )


class ToolResultFaults:
    handles = RESULT_FAULTS

    def __init__(self, core, ledger: ToolLedger, mcp: McpTraffic) -> None:
        self.core = core
        self.mcp = mcp
        self.pending: dict[str, Injection] = {}  # call id -> a fault decided, not yet applied
        self.rewritten: dict[str, tuple[str, bool]] = {}  # call id -> (text the model reads, is_error)
        ledger.on_tool_result.append(self.tool_result)

    def tool_result(self, flow: http.HTTPFlow, result: providers.ToolResult) -> None:
        state = self.core.state
        key = tool_key(result.name)
        if state is None or key in self.mcp.tools_seen:
            return
        inj = state.consider(RESULT_FAULTS, Target(tool=key), flow)
        if inj is not None:
            self.pending[result.id] = inj

    def request(self, flow: http.HTTPFlow) -> None:
        # runs after ModelAPI's request hook, whose ledger call decided the faults for new results
        if self.core.state is None or flow.response is not None or not (self.pending or self.rewritten):
            return
        parsed = providers.model_call(flow.request)
        if parsed is None:
            return
        provider, body = parsed
        hits: list[str] = []

        def rewrite(call_id: str, text: str) -> tuple[str, bool] | None:
            if call_id in self.pending:
                self.rewritten[call_id] = self._apply(flow, self.pending.pop(call_id), call_id, text)
            if call_id in self.rewritten:
                hits.append(call_id)
            return self.rewritten.get(call_id)

        provider.rewrite_tool_results(body, rewrite)
        if hits:
            flow.request.set_text(json.dumps(body))

    @staticmethod
    def _apply(flow: http.HTTPFlow, inj: Injection, call_id: str, text: str) -> tuple[str, bool]:
        """The result the model reads from now on, for the first request that carries it."""
        if inj.id == "tool.error":
            faulted, is_error, details = (
                error_message(inj.options, inj.canary),
                True,
                {"error_kind": inj.options.error_kind},
            )
        else:
            rewrite_text, _, details = result_rewriters(inj)
            faulted, is_error = rewrite_text(text), False
        annotate(flow, inj.applied(tool_call_id=call_id, **details), f"tool result {call_id} rewritten")
        return faulted, is_error
