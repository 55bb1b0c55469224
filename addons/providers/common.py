"""What every provider adapter produces: the call's request, its reply, tool calls and results."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json

from mitmchaos.addons.providers.sse import SSEEvent

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def parse_json(body: bytes) -> Any:
    """``json.loads(body)``, by pydantic's Rust parser (~4x faster on a model call's body); json
    decides what that one refuses (lone surrogate escapes, UTF-16 and -32 bodies)."""
    try:
        return from_json(body)
    except ValueError:
        return json.loads(body)


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for."""

    id: str
    name: str
    input: Any


@dataclass(frozen=True)
class ToolResult:
    """A tool result the agent sent back in a later request; ``name`` is known if its call is in history."""

    id: str
    ok: bool
    error: str | None = None
    name: str | None = None


@dataclass(slots=True)
class CallRequest:
    model: str | None
    stream: bool
    tool_results: list[ToolResult] = field(default_factory=list)


class Reply:
    """What the model answered, filled from a JSON body or from SSE events as they pass.

    ``usage`` follows the llm_call contract: input_tokens excludes cache reads and writes.
    ``on_tool_call`` is called as soon as each tool call is complete (mid-stream for SSE).
    """

    def __init__(self, on_tool_call: Callable[[ToolCall], None] | None = None) -> None:
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.usage: dict[str, int | None] = dict.fromkeys(USAGE_FIELDS)
        self.tool_calls: list[ToolCall] = []
        self.error: str | None = None
        self.on_tool_call = on_tool_call

    def json(self, body: Any) -> None:
        raise NotImplementedError

    def event(self, event: SSEEvent) -> None:
        raise NotImplementedError

    def _tool_call(self, call: ToolCall) -> None:
        self.tool_calls.append(call)
        if self.on_tool_call is not None:
            self.on_tool_call(call)


def parse_arguments(text: str | None) -> Any:
    """Tool arguments streamed or sent as a JSON string; kept as text when they are not JSON."""
    if not text:
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return text


# rewrite(call_id, text) -> (new text, is_error) or None: how a tool-result fault edits a request
ResultRewrite = Callable[[str, str], "tuple[str, bool] | None"]


def text_of(content: Any, limit: int | None = 500) -> str:
    """Plain text of a message content (a string or a list of text blocks), shortened."""
    if isinstance(content, list):
        content = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content or "")[:limit]


def rewrite_content(content: Any, rewrite: ResultRewrite, call_id: str) -> tuple[Any, bool | None]:
    """A tool result's content after ``rewrite``, and its error flag (None: left alone)."""
    new = rewrite(call_id, text_of(content, None))
    if new is None:
        return content, None
    text, is_error = new
    if not isinstance(content, list):
        return text, is_error
    texts = [b for b in content if isinstance(b, dict) and "text" in b]
    others = [b for b in content if not (isinstance(b, dict) and "text" in b)]
    return [{**(texts[0] if texts else {"type": "text"}), "text": text}, *others], is_error


def shortest_valid_suffix(items: list, drop_oldest: int, repair: Callable[[list], list]) -> list:
    """``items`` without its ``drop_oldest`` oldest entries, repaired into a request the API accepts.

    ``repair`` removes what a cut orphans (a tool result whose call is gone). When nothing
    valid is left, fewer items are dropped: a trim never leaves an empty conversation.
    """
    for n in range(min(drop_oldest, len(items)), -1, -1):
        kept = repair(items[n:])
        if kept:
            return kept
    return items
