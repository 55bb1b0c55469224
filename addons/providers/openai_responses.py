"""OpenAI Responses API (``POST /v1/responses``, what Codex uses), JSON and SSE."""

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

CALL_ITEMS = ("function_call", "custom_tool_call")  # Codex's apply_patch is a custom tool
RESULT_ITEMS = ("function_call_output", "custom_tool_call_output")
SYSTEM_ROLES = ("system", "developer")
FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


class ResponsesReply(Reply):
    def json(self, body: Any) -> None:
        if not isinstance(body, dict):
            return
        self._response(body)
        for item in body.get("output") or []:
            self._item(item)

    def event(self, event: SSEEvent) -> None:
        data = event.json()
        if not isinstance(data, dict):
            return
        kind = data.get("type")
        if kind in ("response.created", "response.in_progress") or kind in FINAL_EVENTS:
            self._response(data.get("response") or {})
        elif kind == "response.output_item.done":
            self._item(data.get("item") or {})
        elif kind == "error":
            self.error = openai_common.describe(data)

    def _response(self, response: dict) -> None:
        if response.get("error"):
            self.error = openai_common.describe(response["error"])
        self.model = response.get("model") or self.model
        status = response.get("status")
        if status and status != "in_progress":
            self.stop_reason = (response.get("incomplete_details") or {}).get("reason") or status
        self.usage.update(
            openai_common.usage(
                response.get("usage"), "input_tokens", "output_tokens", "input_tokens_details"
            )
        )

    def _item(self, item: dict) -> None:
        if item.get("type") in CALL_ITEMS:
            arguments = item.get("arguments") if item["type"] == "function_call" else item.get("input")
            self._tool_call(ToolCall(item.get("call_id"), item.get("name"), parse_arguments(arguments)))


def _items(body: dict) -> list[dict]:
    items = body.get("input")
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _repair(items: list[dict]) -> list[dict]:
    """Drop tool outputs whose call item was cut (the API rejects them)."""
    calls = {i.get("call_id") for i in items if i.get("type") in CALL_ITEMS}
    return [i for i in items if i.get("type") not in RESULT_ITEMS or i.get("call_id") in calls]


class OpenAIResponses(openai_common.OpenAIFamily):
    name = "openai-responses"
    reply_type = ResponsesReply

    @staticmethod
    def matches(path: str) -> bool:
        return path.endswith("/responses")

    @staticmethod
    def parse_request(body: dict) -> CallRequest:
        items = _items(body)
        names = {i.get("call_id"): i.get("name") for i in items if i.get("type") in CALL_ITEMS}
        # Responses has no error flag on tool outputs either: every result counts as ok.
        results = [
            ToolResult(i.get("call_id"), True, None, names.get(i.get("call_id")))
            for i in items
            if i.get("type") in RESULT_ITEMS
        ]
        return CallRequest(body.get("model"), bool(body.get("stream")), results)

    @staticmethod
    def rewrite_tool_results(body: dict, rewrite: ResultRewrite) -> None:
        """Responses has no error flag on tool outputs: a failure is carried by the text alone."""
        for item in _items(body):
            if item.get("type") in RESULT_ITEMS:
                item["output"], _ = rewrite_content(item.get("output"), rewrite, item.get("call_id"))

    @staticmethod
    def trim(body: dict, drop_oldest: int, drop_system: bool) -> tuple[int, bool]:
        dropped_system = drop_system and body.pop("instructions", None) is not None
        if not isinstance(body.get("input"), list):  # a plain string prompt has nothing older to drop
            return 0, dropped_system
        items = _items(body)
        system = [i for i in items if i.get("role") in SYSTEM_ROLES]
        conversation = [i for i in items if i.get("role") not in SYSTEM_ROLES]
        kept = shortest_valid_suffix(conversation, drop_oldest, _repair)
        body["input"] = ([] if drop_system else system) + kept
        return len(conversation) - len(kept), dropped_system or (drop_system and bool(system))
