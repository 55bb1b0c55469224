"""Provider adapters, the SSE parser, prices and the fake model server's wire formats."""

import json

import pytest

from mitmchaos.addons import providers
from mitmchaos.addons.providers import Anthropic, OpenAIChat, OpenAIResponses, SSEParser
from mitmchaos.model_server import Reply as WireReply
from mitmchaos.model_server import ToolUse, Turn
from mitmchaos.prices import UNKNOWN_MODEL_PRICE, cost_usd, price_for
from mitmchaos.plan import Price


def test_detect_by_path_on_any_host_with_query_strings():
    assert providers.detect("POST", "/v1/messages?beta=true") is Anthropic
    assert providers.detect("POST", "/v1/chat/completions") is OpenAIChat
    assert providers.detect("POST", "/openai/v1/responses") is OpenAIResponses
    assert providers.detect("POST", "/v1/messages/count_tokens") is None
    assert providers.detect("GET", "/v1/messages") is None


def test_sse_parser_holds_only_the_unfinished_event_and_reports_offsets():
    parser = SSEParser()
    assert parser.feed(b'event: a\ndata: {"x"') == []
    (first, end), (crlf, _) = parser.feed(
        b": 1}\n\nevent: b\r\ndata: 2\r\n\r\n: keep-alive\n\ndata: [DONE]\n"
    )
    assert first.event == "a" and first.json() == {"x": 1} and end == len(b": 1}\n\n")
    assert crlf.event == "b" and crlf.json() == 2
    ((second, _),) = parser.feed(b"\n")
    assert second.event == "message" and second.data == "[DONE]" and second.json() is None


def _events(provider: str, turn: Turn, body: dict):
    parser = SSEParser()
    wire = b"".join(WireReply(turn, {**body, "stream": True}, provider).events())
    # feed in awkward slices: parsing must not depend on how the network chunks the stream
    return [e for i in range(0, len(wire), 7) for e, _ in parser.feed(wire[i : i + 7])]


TURN = Turn(
    text="all done now",
    tool_calls=[ToolUse("Bash", {"command": "rm -rf build"}, id="call_1")],
    input_tokens=100,
    output_tokens=20,
    cache_read_tokens=50,
    cache_write_tokens=10,
)


@pytest.mark.parametrize(
    "adapter,wire_name,body",
    [
        (Anthropic, "anthropic", {"model": "claude-sonnet-4-6"}),
        (OpenAIChat, "openai-chat", {"model": "gpt-4o", "stream_options": {"include_usage": True}}),
        (OpenAIResponses, "openai-responses", {"model": "gpt-5"}),
    ],
)
def test_replies_parse_alike_from_json_and_sse(adapter, wire_name, body):
    seen = []
    streamed = adapter.reply_type(on_tool_call=seen.append)
    for event in _events(wire_name, TURN, body):
        streamed.event(event)
    whole = adapter.reply_type()
    whole.json(WireReply(TURN, body, wire_name).json())
    for reply in (streamed, whole):
        assert reply.model == body["model"]
        assert [(c.id, c.name, c.input) for c in reply.tool_calls] == [
            ("call_1", "Bash", {"command": "rm -rf build"})
        ]
        assert reply.usage["input_tokens"] == 100 and reply.usage["output_tokens"] == 20
        assert reply.usage["cache_read_tokens"] == 50
        assert reply.stop_reason in ("tool_use", "tool_calls", "completed")
    assert seen == streamed.tool_calls
    if adapter is Anthropic:
        assert streamed.usage["cache_write_tokens"] == 10


def test_anthropic_request_tool_results_are_named_from_the_history():
    body = {
        "model": "m",
        "stream": True,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "is_error": True,
                        "content": [{"type": "text", "text": "exit 1: no such file"}],
                    }
                ],
            },
        ],
    }
    request = Anthropic.parse_request(body)
    assert request.stream and request.model == "m"
    (result,) = request.tool_results
    assert (result.id, result.ok, result.error, result.name) == ("t1", False, "exit 1: no such file", "Bash")


def _agent_loop(turns: int) -> list[dict]:
    messages = [{"role": "user", "content": "task"}]
    for i in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"},
                    {"type": "text", "text": f"note {i}"},
                ],
            }
        )
    return messages


def test_anthropic_trim_keeps_a_user_first_suffix_with_tool_pairs_intact():
    body = {"system": "be careful", "messages": _agent_loop(3)}
    dropped, dropped_system = Anthropic.trim(body, drop_oldest=2, drop_system=True)
    messages = body["messages"]
    assert "system" not in body and dropped_system
    assert messages[0]["role"] == "user"
    uses = {
        b["id"] for m in messages for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"
    }
    results = {
        b["tool_use_id"]
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }
    assert results <= uses and uses == {"t1", "t2"}
    # task and the t0 call are gone; t0's result block went with its call, the note beside it stays
    assert messages[0]["content"] == [{"type": "text", "text": "note 0"}]
    assert dropped == 7 - len(messages) == 2


def test_trim_never_leaves_an_empty_conversation():
    body = {"messages": [{"role": "user", "content": "only"}]}
    assert Anthropic.trim(body, drop_oldest=5, drop_system=False) == (0, False)
    assert body["messages"] == [{"role": "user", "content": "only"}]


def test_openai_trims_drop_orphaned_tool_outputs_and_system_prompts():
    chat = {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            {"role": "user", "content": "again"},
        ]
    }
    assert OpenAIChat.trim(chat, drop_oldest=2, drop_system=False) == (3, False)
    assert [m["role"] for m in chat["messages"]] == ["system", "user"]
    responses = {
        "instructions": "i",
        "input": [
            {"role": "developer", "content": "d"},
            {"type": "function_call", "call_id": "c1", "name": "f"},
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
            {"role": "user", "content": "u"},
        ],
    }
    assert OpenAIResponses.trim(responses, drop_oldest=1, drop_system=True) == (2, True)
    assert responses["input"] == [{"role": "user", "content": "u"}] and "instructions" not in responses


def test_error_bodies_are_the_providers_own():
    body, headers = Anthropic.error(529, "Overloaded [E-CHAOS-00000000]")
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"
    assert body["request_id"] == headers["request-id"]
    body, _ = OpenAIChat.error(429, "slow down")
    assert body == {
        "error": {"message": "slow down", "type": "requests", "param": None, "code": "rate_limit_exceeded"}
    }
    assert OpenAIResponses.rate_limit_headers(1.5)["x-ratelimit-reset-requests"] == "1.5s"
    assert Anthropic.rate_limit_headers(2)["anthropic-ratelimit-requests-remaining"] == "0"


def test_prices_by_glob_with_plan_overrides_and_a_conservative_default():
    assert price_for("claude-opus-4-1-20250805").input == 15 and price_for("claude-opus-4-8").input == 5
    assert price_for("gpt-5-mini").input == 0.25 and price_for("gpt-5").input == 1.25
    assert price_for("some-new-model") == UNKNOWN_MODEL_PRICE
    assert price_for("gpt-5", {"gpt-*": Price(input=1, output=1)}).input == 1
    usage = {
        "input_tokens": 1_000_000,
        "output_tokens": 1_000_000,
        "cache_read_tokens": 1_000_000,
        "cache_write_tokens": 1_000_000,
    }
    assert cost_usd("claude-sonnet-4-6", usage) == pytest.approx(3 + 15 + 0.3 + 3.75)
    assert cost_usd("claude-sonnet-4-6", dict.fromkeys(usage)) == 0


def test_model_server_responses_stream_ends_with_response_completed():
    events = _events("openai-responses", Turn(text="x"), {"model": "gpt-5"})
    assert events[0].event == "response.created" and events[-1].event == "response.completed"
    assert [json.loads(e.data)["sequence_number"] for e in events] == list(range(len(events)))


@pytest.mark.parametrize("body", [
    b'{"model": "m", "messages": [{"role": "user", "content": "caf\\u00e9 \xe2\x98\x83"}]}',
    b'{"lone": "\\ud800", "nan": NaN, "big": 123456789012345678901234567890, "dup": 1, "dup": 2}',
    '{"bom": 1}'.encode("utf-8-sig"),
    '{"wide": "\u00e9"}'.encode("utf-16"),
    b'[1e400, -0.0, 0.1]',
])
def test_parse_json_reads_what_json_reads(body):
    assert repr(providers.parse_json(body)) == repr(json.loads(body))


@pytest.mark.parametrize("body", [b"", b"{", b"[1] x", b"\xff"])
def test_parse_json_refuses_what_json_refuses(body):
    with pytest.raises(ValueError):
        providers.parse_json(body)
