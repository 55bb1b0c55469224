"""ModelAPI: sees every model call (Anthropic Messages, OpenAI Chat Completions and
Responses), injects the llm.* faults and writes llm_call events; tool calls and results go
to the ToolLedger.

SSE replies are parsed as they pass, through ``flow.response.stream``: each chunk goes on
to the agent at once and only an unfinished event is held by the parser. JSON replies are
small and parsed whole in ``response``. Calls answered by an earlier addon (an egress
fault, the policy) are still recorded, since probes count calls; they are never faulted.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import dataclass

from mitmproxy import http

from mitmchaos.addons import providers
from mitmchaos.addons.faults import llm
from mitmchaos.addons.headers import content, header, set_header
from mitmchaos.addons.ledger import STOP_REPLY, ToolLedger
from mitmchaos.addons.state import pretty_host
from mitmchaos.prices import cost_usd


@dataclass(slots=True)  # slots: one is made per call, and a smaller object is cheaper to make and read
class Call:
    """One model call in flight."""

    provider: type
    host: str  # the request's pretty host, read once
    request: providers.CallRequest
    reply: providers.Reply
    retry_count: int | None
    parser: providers.SSEParser | None = None  # an event stream's, made when one passes
    streamed: bool = False  # the stream callable saw the body
    faulted: str | None = None  # the first fault applied
    error: str | None = None
    cut: llm.StreamCut | None = None
    chunk_delay: llm.ChunkDelay | None = None


class ModelAPI:
    handles = llm.HANDLES

    def __init__(self, core, ledger: ToolLedger) -> None:
        self.core = core
        self.ledger = ledger
        # flow id -> call; kept here, not in flow.metadata, which is saved with the flow
        self.calls: dict[str, Call] = {}

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        state = self.core.state
        parsed = providers.model_call(flow.request) if state is not None else None
        if parsed is None:
            return None
        provider, body = parsed
        reply = provider.reply_type(on_tool_call=lambda call: self.ledger.call(flow, call))
        retry = header(flow.request.headers, "x-stainless-retry-count")
        call = Call(provider, pretty_host(flow.request), provider.parse_request(body), reply,
                    int(retry) if retry.isdigit() else None)
        self.calls[flow.id] = call
        self.ledger.results(flow, call.request.tool_results)
        if flow.response:
            return None
        # The stream is parsed as it passes, so it must come back uncompressed.
        set_header(flow.request.headers, "accept-encoding", "identity")
        return llm.inject(state, call, flow)

    def responseheaders(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        if "text/event-stream" not in header(flow.response.headers, "content-type"):
            return None
        call = self.calls.get(flow.id)
        if call is None:
            # mitmproxy buffers whole bodies by default: an event stream (a model's without a
            # plan, or any other) would reach the agent only at its end.
            flow.response.stream = flow.response.stream or True
            return None
        call.parser = providers.SSEParser()
        flow.response.stream = lambda data: self._pass(call, flow, data)
        if call.chunk_delay is None:
            return None
        call.chunk_delay.start()
        return call.chunk_delay.before_first_chunk()

    @staticmethod
    def _pass(call: Call, flow: http.HTTPFlow, data: bytes) -> bytes | list[bytes]:
        if flow.metadata.get(STOP_REPLY):  # stopped: nothing more reaches the agent
            return []
        if not data:  # end of the body
            return data
        call.streamed = True
        events = call.parser.feed(data)
        out: bytes | list[bytes] = data
        if call.cut is not None:
            out, passed = call.cut.filter(data, [end for _, end in events])
            events = events[:passed]  # what the agent never receives is not reported
        sent = 0  # where this chunk's last fully passed event ends
        for event, end in events:
            call.reply.event(event)
            if flow.metadata.get(STOP_REPLY):  # a tool-call subscriber stopped the reply at this event
                call.error = f"reply stopped: {flow.metadata[STOP_REPLY]}"
                llm.close_client(flow)
                return [data[:sent]] if sent else []
            sent = end
        return out

    def response(self, flow: http.HTTPFlow) -> None:
        call = self.calls.pop(flow.id, None)
        if call is None:
            return
        if not call.streamed:
            self._read_whole(call, flow.response)
        self._finish(call, flow)

    def error(self, flow: http.HTTPFlow) -> None:
        call = self.calls.pop(flow.id, None)
        if call is not None:
            call.error = call.error or (flow.error.msg if flow.error else "error")
            self._finish(call, flow)

    @staticmethod
    def _read_whole(call: Call, response: http.Response) -> None:
        body = content(response) or b""
        if "text/event-stream" in header(response.headers, "content-type"):
            for event, _ in providers.SSEParser().feed(body):
                call.reply.event(event)
            return
        try:
            call.reply.json(providers.parse_json(body))
        except ValueError:
            pass

    def _finish(self, call: Call, flow: http.HTTPFlow) -> None:
        if call.chunk_delay is not None:
            call.chunk_delay.finish()
        state = self.core.state
        if state is None:
            return
        reply = call.reply
        state.events.emit(
            "llm_call",
            provider=call.provider.name,
            host=call.host,
            path=flow.request.path.split("?", 1)[0],
            requested_model=call.request.model,
            model=reply.model,
            status=flow.response.status_code if flow.response else None,
            stream=call.request.stream,
            stop_reason=reply.stop_reason,
            usage=reply.usage,
            cost_usd=cost_usd(reply.model or call.request.model, reply.usage, state.plan.prices),
            duration_s=round(time.time() - flow.request.timestamp_start, 3),
            retry_count=call.retry_count,
            faulted=call.faulted,
            error=call.error or reply.error,
        )
