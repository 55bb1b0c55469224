"""OpenAI Chat Completions (``POST /v1/chat/completions``), JSON and SSE."""

from __future__ import annotations

from typing import Any

from mitmchaos.addons.providers import openai_common
from mitmchaos.addons.providers.common import (
    CallRequest,
    Reply,
    ResultRewrite,
    ToolCall,
    ToolResult,
    parse_arguments,
    rewrite_content,
    shortest_valid_suffix,
)
from mitmchaos.addons.providers.sse import SSEEvent

SYSTEM_ROLES = ("system", "developer")


class ChatReply(Reply):
    def __init__(self, on_tool_call=None) -> None:
        super().__init__(on_tool_call)
        self._open_tools: dict[int, list] = {}  # tool_calls index -> [id, name, argument parts]

    def json(self, body: Any) -> None:
        if not isinstance(body, dict):
            return
        if "error" in body:
            self.error = openai_common.describe(body["error"])
            return
        self.model = body.get("model")
        self.usage.update(
            openai_common.usage(
                body.get("usage"), "prompt_tokens", "completion_tokens", "prompt_tokens_details"
            )
        )
        for choice in body.get("choices") or []:
            self.stop_reason = choice.get("finish_reason")
            for call in (choice.get("message") or {}).get("tool_calls") or []:
                function = call.get("function") or {}
                self._tool_call(
                    ToolCall(call.get("id"), function.get("name"), parse_arguments(function.get("arguments")))
                )

    def event(self, event: SSEEvent) -> None:
        data = event.json()
        if not isinstance(data, dict):
            return
        if "error" in data:
            self.error = openai_common.describe(data["error"])
            return
        self.model = data.get("model") or self.model
        if data.get("usage"):
            self.usage.update(
                openai_common.usage(
                    data["usage"], "prompt_tokens", "completion_tokens", "prompt_tokens_details"
                )
            )
        for choice in data.get("choices") or []:
            for delta in (choice.get("delta") or {}).get("tool_calls") or []:
                slot = self._open_tools.setdefault(delta.get("index", 0), [None, None, []])
                function = delta.get("function") or {}
                slot[0] = delta.get("id") or slot[0]
                slot[1] = function.get("name") or slot[1]
                slot[2].append(function.get("arguments") or "")
            if choice.get("finish_reason"):
                self.stop_reason = choice["finish_reason"]
                self._close_tools()

    def _close_tools(self) -> None:
        for call_id, name, parts in self._open_tools.values():
            self._tool_call(ToolCall(call_id, name, parse_arguments("".join(parts))))
        self._open_tools.clear()


def _repair(messages: list[dict]) -> list[dict]:
    """Drop tool messages whose assistant tool_calls entry was cut (the API rejects them)."""
    calls = {c.get("id") for m in messages for c in m.get("tool_calls") or []}
    return [m for m in messages if m.get("role") != "tool" or m.get("tool_call_id") in calls]


class OpenAIChat(openai_common.OpenAIFamily):
    name = "openai-chat"
    reply_type = ChatReply

    @staticmethod
    def matches(path: str) -> bool:
        return path.endswith("/chat/completions")

    @staticmethod
    def parse_request(body: dict) -> CallRequest:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        names = {
            c.get("id"): (c.get("function") or {}).get("name")
            for m in messages
            for c in m.get("tool_calls") or []
        }
        # Chat Completions has no error flag on tool results: every result counts as ok.
        results = [
            ToolResult(m.get("tool_call_id"), True, None, names.get(m.get("tool_call_id")))
            for m in messages
            if m.get("role") == "tool"
        ]
        return CallRequest(body.get("model"), bool(body.get("stream")), results)

    @staticmethod
    def rewrite_tool_results(body: dict, rewrite: ResultRewrite) -> None:
        """Chat Completions has no error flag: a failure is carried by the text alone."""
        for message in body.get("messages") or []:
            if isinstance(message, dict) and message.get("role") == "tool":
                message["content"], _ = rewrite_content(
                    message.get("content"), rewrite, message.get("tool_call_id")
                )

    @staticmethod
    def trim(body: dict, drop_oldest: int, drop_system: bool) -> tuple[int, bool]:
        messages = body.get("messages") or []
        system = [m for m in messages if m.get("role") in SYSTEM_ROLES]
        conversation = [m for m in messages if m.get("role") not in SYSTEM_ROLES]
        kept = shortest_valid_suffix(conversation, drop_oldest, _repair)
        body["messages"] = ([] if drop_system else system) + kept
        return len(conversation) - len(kept), drop_system and bool(system)
