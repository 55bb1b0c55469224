"""A local fake model upstream: Anthropic Messages, OpenAI Chat Completions and OpenAI
Responses, JSON and SSE, on 127.0.0.1.

    with ModelServer(brain) as server:          # brain(body, provider) -> Turn
        client = anthropic.Anthropic(base_url=server.url, api_key="sk-test")
        ...
        server.received[-1].body                 # what the upstream got

Streams go out with chunked transfer encoding, one SSE event per chunk, ``chunk_delay_s``
apart, in the event sequences the real APIs send (and Claude Code and Codex require: a
Responses stream ends with ``response.completed``). The reply is decided by the ``brain``:
a callable taking the request body and the provider (``anthropic``, ``openai-chat``,
``openai-responses``) and returning a ``Turn`` (text and/or tool calls, usage).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

PATHS = {
    "/v1/messages": "anthropic",
    "/v1/chat/completions": "openai-chat",
    "/v1/responses": "openai-responses",
}


@dataclass
class ToolUse:
    name: str
    input: dict[str, Any]
    id: str = field(default_factory=lambda: f"call_{secrets.token_hex(8)}")


@dataclass
class Turn:
    """One model reply. Token counts left as None are estimated from the request and the reply."""

    text: str = ""
    tool_calls: list[ToolUse] = field(default_factory=list)
    model: str | None = None  # the served model; None answers with the requested one
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


Brain = Callable[[dict, str], Turn]


def hello_brain(body: dict, provider: str) -> Turn:
    """The default brain: a fixed greeting."""
    return Turn(text="Hello from the model server. one two three four")


@dataclass(frozen=True)
class Received:
    provider: str | None
    path: str
    headers: dict[str, str]
    body: Any


class ModelServer:
    def __init__(
        self, brain: Brain = hello_brain, host: str = "127.0.0.1", port: int = 0, chunk_delay_s: float = 0.01
    ) -> None:
        self.brain = brain
        self.chunk_delay_s = chunk_delay_s
        self.received: list[Received] = []
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ModelServer:
        # stop() waits for the serving loop's next poll: the default 0.5 s delayed every proxy shutdown
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="model-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def bodies(self, provider: str | None = None) -> list[Any]:
        return [r.body for r in self.received if provider is None or r.provider == provider]


def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # else Nagle and delayed ACKs add ~40 ms per chunk

        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = raw.decode("utf-8", "replace")
            provider = PATHS.get(path)
            server.received.append(Received(provider, self.path, dict(self.headers.items()), body))
            if path == "/v1/messages/count_tokens" and isinstance(body, dict):
                self._json(200, {"input_tokens": _estimate_tokens(body)})
            elif provider is None or not isinstance(body, dict):
                self._json(404, {"error": {"type": "not_found_error", "message": f"no route for {path}"}})
            else:
                self._answer(provider, body)

        def do_GET(self) -> None:
            if self.headers.get("upgrade", "").lower() == "websocket":
                # Codex tries the Responses API over WebSocket first; 426 makes it fall back to SSE at once
                self._json(426, {"error": {"type": "invalid_request_error", "message": "use HTTP, not WebSocket"}})
            elif urlsplit(self.path).path == "/v1/models":
                self._json(200, {"data": [], "object": "list"})
            else:
                self._json(404, {"error": {"type": "not_found_error", "message": "not found"}})

        def do_HEAD(self) -> None:  # Claude Code's connectivity probe (HEAD /)
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def _answer(self, provider: str, body: dict) -> None:
            turn = server.brain(body, provider)
            reply = Reply(turn, body, provider)
            if not body.get("stream"):
                self._json(200, reply.json())
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for event in reply.events():
                    self._chunk(event)
                    time.sleep(server.chunk_delay_s)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client (or a chaos fault) cut the stream

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _json(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _estimate_tokens(body: dict) -> int:
    return max(1, len(json.dumps(body)) // 4)


def _sse(event: str | None, data: dict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def _pieces(text: str) -> list[str]:
    """Text as streamed deltas, word by word (spaces kept)."""
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)] if text else []


class Reply:
    """A Turn rendered in one provider's wire format, as a JSON body or an SSE event sequence."""

    def __init__(self, turn: Turn, body: dict, provider: str) -> None:
        self.turn, self.provider = turn, provider
        self.model = turn.model or body.get("model") or "unknown-model"
        self.input_tokens = turn.input_tokens if turn.input_tokens is not None else _estimate_tokens(body)
        self.output_tokens = (
            turn.output_tokens
            if turn.output_tokens is not None
            else max(1, (len(turn.text) + sum(len(json.dumps(c.input)) for c in turn.tool_calls)) // 4)
        )
        self.include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.id = secrets.token_hex(12)

    def json(self) -> dict:
        return {
            "anthropic": self._anthropic_json,
            "openai-chat": self._chat_json,
            "openai-responses": self._responses_json,
        }[self.provider]()

    def events(self) -> Iterator[bytes]:
        return {
            "anthropic": self._anthropic_events,
            "openai-chat": self._chat_events,
            "openai-responses": self._responses_events,
        }[self.provider]()

    # ---------------------------------------------------------------- Anthropic Messages

    def _anthropic_usage(self, output_tokens: int) -> dict:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": self.turn.cache_read_tokens,
            "cache_creation_input_tokens": self.turn.cache_write_tokens,
        }

    def _anthropic_stop(self) -> str:
        return "tool_use" if self.turn.tool_calls else "end_turn"

    def _anthropic_json(self) -> dict:
        content: list[dict] = [{"type": "text", "text": self.turn.text}] if self.turn.text else []
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in self.turn.tool_calls
        ]
        return {
            "id": f"msg_{self.id}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self._anthropic_stop(),
            "stop_sequence": None,
            "usage": self._anthropic_usage(self.output_tokens),
        }

    def _anthropic_events(self) -> Iterator[bytes]:
        message = {
            **self._anthropic_json(),
            "content": [],
            "stop_reason": None,
            "usage": self._anthropic_usage(1),
        }
        yield _sse("message_start", {"type": "message_start", "message": message})
        index = 0
        if self.turn.text:
            yield _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            yield _sse("ping", {"type": "ping"})
            for piece in _pieces(self.turn.text):
                yield _sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        for call in self.turn.tool_calls:
            yield _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}},
                },
            )
            arguments = json.dumps(call.input)
            for start in range(0, len(arguments), 16):
                yield _sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": arguments[start : start + 16]},
                    },
                )
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": self._anthropic_stop(), "stop_sequence": None},
                "usage": {"output_tokens": self.output_tokens},
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})

    # ---------------------------------------------------------------- OpenAI Chat Completions

    def _chat_usage(self) -> dict:
        cached = self.turn.cache_read_tokens
        return {
            "prompt_tokens": self.input_tokens + cached,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + cached + self.output_tokens,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def _chat_finish(self) -> str:
        return "tool_calls" if self.turn.tool_calls else "stop"

    def _chat_base(self, kind: str) -> dict:
        return {
            "id": f"chatcmpl-{self.id}",
            "object": kind,
            "created": int(time.time()),
            "model": self.model,
            "system_fingerprint": "fp_mitmchaos",
        }

    def _chat_json(self) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": self.turn.text or None, "refusal": None}
        if self.turn.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.input)},
                }
                for c in self.turn.tool_calls
            ]
        return {
            **self._chat_base("chat.completion"),
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": self._chat_finish()}
            ],
            "usage": self._chat_usage(),
        }

    def _chat_events(self) -> Iterator[bytes]:
        base = self._chat_base("chat.completion.chunk")

        def chunk(delta: dict, finish: str | None = None) -> bytes:
            return _sse(
                None,
                {
                    **base,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                },
            )

        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for piece in _pieces(self.turn.text):
            yield chunk({"content": piece})
        for index, call in enumerate(self.turn.tool_calls):
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
            arguments = json.dumps(call.input)
            for start in range(0, len(arguments), 16):
                yield chunk(
                    {
                        "tool_calls": [
                            {"index": index, "function": {"arguments": arguments[start : start + 16]}}
                        ]
                    }
                )
        yield chunk({}, self._chat_finish())
        if self.include_usage:
            yield _sse(None, {**base, "choices": [], "usage": self._chat_usage()})
        yield _sse(None, "[DONE]")

    # ---------------------------------------------------------------- OpenAI Responses

    def _responses_items(self) -> list[dict]:
        items = []
        if self.turn.text:
            items.append(
                {
                    "id": f"msg_{self.id}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": self.turn.text, "annotations": []}],
                }
            )
        items += [
            {
                "id": f"fc_{c.id}",
                "type": "function_call",
                "status": "completed",
                "call_id": c.id,
                "name": c.name,
                "arguments": json.dumps(c.input),
            }
            for c in self.turn.tool_calls
        ]
        return items

    def _responses_json(self, status: str = "completed") -> dict:
        done = status == "completed"
        cached = self.turn.cache_read_tokens
        return {
            "id": f"resp_{self.id}",
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "error": None,
            "incomplete_details": None,
            "model": self.model,
            "output": self._responses_items() if done else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": self.input_tokens + cached,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": self.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.input_tokens + cached + self.output_tokens,
            }
            if done
            else None,
        }

    def _responses_events(self) -> Iterator[bytes]:
        sequence = iter(range(1_000_000))

        def event(kind: str, **fields) -> bytes:
            return _sse(kind, {"type": kind, "sequence_number": next(sequence), **fields})

        yield event("response.created", response=self._responses_json("in_progress"))
        yield event("response.in_progress", response=self._responses_json("in_progress"))
        for index, item in enumerate(self._responses_items()):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                part = {"type": "output_text", "text": "", "annotations": []}
                yield event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=part,
                )
                for piece in _pieces(text):
                    yield event(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=index,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
                yield event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
                yield event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part={**part, "text": text},
                )
            else:
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                for start in range(0, len(item["arguments"]), 16):
                    yield event(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=index,
                        delta=item["arguments"][start : start + 16],
                    )
                yield event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                )
            yield event("response.output_item.done", output_index=index, item=item)
        yield event("response.completed", response=self._responses_json())
