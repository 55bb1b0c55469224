"""Anthropic Messages API (``POST /v1/messages``), JSON and SSE."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from mitmchaos.addons.providers.common import (
    CallRequest,
    Reply,
    ResultRewrite,
    ToolCall,
    ToolResult,
    parse_arguments,
    rewrite_content,
    shortest_valid_suffix,
    text_of,
)
from mitmchaos.addons.providers.sse import SSEEvent

ERROR_TYPES = {429: "rate_limit_error", 529: "overloaded_error"}  # every other 5xx is an api_error


class AnthropicReply(Reply):
    def __init__(self, on_tool_call=None) -> None:
        super().__init__(on_tool_call)
        self._open_tools: dict[int, tuple[str, str, list[str]]] = {}  # block index -> id, name, json parts

    def json(self, body: Any) -> None:
        if not isinstance(body, dict):
            return
        if body.get("type") == "error":
            self.error = _describe(body.get("error"))
            return
        self.model = body.get("model")
        self.stop_reason = body.get("stop_reason")
        self._usage(body.get("usage"))
        for block in body.get("content") or []:
            if block.get("type") == "tool_use":
                self._tool_call(ToolCall(block.get("id"), block.get("name"), block.get("input")))

    def event(self, event: SSEEvent) -> None:
        data = event.json()
        if not isinstance(data, dict):
            return
        kind, index = data.get("type"), data.get("index")
        if kind == "message_start":
            message = data.get("message") or {}
            self.model = message.get("model")
            self._usage(message.get("usage"))
        elif kind == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") == "tool_use":
                self._open_tools[index] = (block.get("id"), block.get("name"), [])
        elif kind == "content_block_delta":
            delta = data.get("delta") or {}
            if delta.get("type") == "input_json_delta" and index in self._open_tools:
                self._open_tools[index][2].append(delta.get("partial_json", ""))
        elif kind == "content_block_stop" and index in self._open_tools:
            call_id, name, parts = self._open_tools.pop(index)
            self._tool_call(ToolCall(call_id, name, parse_arguments("".join(parts))))
        elif kind == "message_delta":
            self.stop_reason = (data.get("delta") or {}).get("stop_reason") or self.stop_reason
            self._usage(data.get("usage"))
        elif kind == "error":
            self.error = _describe(data.get("error"))

    def _usage(self, usage: dict | None) -> None:
        # message_delta repeats (cumulative) counts; the later value wins
        for ours, theirs in (
            ("input_tokens", "input_tokens"),
            ("output_tokens", "output_tokens"),
            ("cache_read_tokens", "cache_read_input_tokens"),
            ("cache_write_tokens", "cache_creation_input_tokens"),
        ):
            if usage and usage.get(theirs) is not None:
                self.usage[ours] = usage[theirs]


def _describe(error: Any) -> str:
    error = error if isinstance(error, dict) else {}
    return f"{error.get('type', 'error')}: {error.get('message', '')}"


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _user_first(messages: list[dict]) -> list[dict]:
    """Start at a user turn and drop tool_result blocks whose tool_use was cut (the API rejects both)."""
    messages = list(messages)
    while True:
        while messages and messages[0].get("role") != "user":
            messages.pop(0)
        calls = {b.get("id") for m in messages for b in _blocks(m) if b.get("type") == "tool_use"}
        repaired, changed = [], False
        for message in messages:
            blocks = _blocks(message)
            kept = [b for b in blocks if b.get("type") != "tool_result" or b.get("tool_use_id") in calls]
            if len(kept) != len(blocks):
                changed = True
                if not kept:
                    continue
                message = {**message, "content": kept}
            repaired.append(message)
        messages = repaired
        if not changed:
            return messages


class Anthropic:
    name = "anthropic"
    family = "anthropic"
    reply_type = AnthropicReply

    @staticmethod
    def matches(path: str) -> bool:
        return path.endswith("/v1/messages")

    @staticmethod
    def parse_request(body: dict) -> CallRequest:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        names = {
            b.get("id"): b.get("name") for m in messages for b in _blocks(m) if b.get("type") == "tool_use"
        }
        results = [
            ToolResult(
                b.get("tool_use_id"),
                not b.get("is_error"),
                text_of(b.get("content")) if b.get("is_error") else None,
                names.get(b.get("tool_use_id")),
            )
            for m in messages
            if m.get("role") == "user"
            for b in _blocks(m)
            if b.get("type") == "tool_result"
        ]
        return CallRequest(body.get("model"), bool(body.get("stream")), results)

    @staticmethod
    def rewrite_tool_results(body: dict, rewrite: ResultRewrite) -> None:
        for message in body.get("messages") or []:
            if isinstance(message, dict) and message.get("role") == "user":
                for block in _blocks(message):
                    if block.get("type") == "tool_result":
                        block["content"], is_error = rewrite_content(
                            block.get("content"), rewrite, block.get("tool_use_id")
                        )
                        if is_error:
                            block["is_error"] = True

    @staticmethod
    def trim(body: dict, drop_oldest: int, drop_system: bool) -> tuple[int, bool]:
        """Drop the system prompt and/or the oldest messages; returns (messages dropped, system dropped)."""
        messages = body.get("messages") or []
        dropped_system = drop_system and body.pop("system", None) is not None
        if drop_system:  # Claude Code also sends system-role messages mid-conversation
            conversation = [m for m in messages if m.get("role") != "system"]
            dropped_system = dropped_system or len(conversation) != len(messages)
        else:
            conversation = messages
        body["messages"] = shortest_valid_suffix(conversation, drop_oldest, _user_first)
        return len(messages) - len(body["messages"]), dropped_system

    @staticmethod
    def error(status: int, message: str) -> tuple[dict, dict[str, str]]:
        request_id = f"req_{secrets.token_hex(12)}"
        body = {
            "type": "error",
            "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message},
            "request_id": request_id,
        }
        return body, {"request-id": request_id}

    @staticmethod
    def rate_limit_headers(retry_after_s: float) -> dict[str, str]:
        reset_at = (datetime.now(UTC) + timedelta(seconds=retry_after_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": reset_at,
            "anthropic-ratelimit-tokens-limit": "80000",
            "anthropic-ratelimit-tokens-remaining": "0",
            "anthropic-ratelimit-tokens-reset": reset_at,
        }
