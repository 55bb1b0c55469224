"""The tool-fault helpers on their own: corruption, injection, toolset changes, tool-result rewrites per API."""

import json
import random

from hypothesis import given
from hypothesis import strategies as st
from mitmchaos.addons.faults.inject import InjectToolResultOptions, inject_text
from mitmchaos.addons.faults.mcp import ToolsetChangeOptions, change_toolset
from mitmchaos.addons.faults.tool import CorruptOptions, corrupt_text, corrupt_value
from mitmchaos.addons.providers import Anthropic, OpenAIChat, OpenAIResponses

DATA = {"a": 1, "b": "two", "c": {"d": True, "e": [1, 2, None]}, "f": 4.5}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


def test_corruption_is_seeded():
    opts = CorruptOptions(variant="corrupt_values", ratio=0.5)
    first = corrupt_value(DATA, opts, random.Random(5))
    assert first == corrupt_value(DATA, opts, random.Random(5)) and first != DATA
    assert any(corrupt_value(DATA, opts, random.Random(seed)) != first for seed in range(6, 12))


def test_ratio_sets_how_many_fields_are_hit():
    nulled = corrupt_value(DATA, CorruptOptions(variant="null_fields", ratio=1), random.Random(0))
    assert nulled == {"a": None, "b": None, "c": {"d": None, "e": [None, None, None]}, "f": None}
    one = corrupt_value(DATA, CorruptOptions(variant="null_fields", ratio=0.01), random.Random(0))
    flat = json.dumps(one)
    assert flat.count("null") == 2  # the one hit plus the None already there
    assert corrupt_value(DATA, CorruptOptions(variant="missing_fields", ratio=0), random.Random(0)) == DATA
    # 6 keys at any depth (a, b, c, d, e, f): half of them go, a parent taking its children along
    kept = corrupt_value(DATA, CorruptOptions(variant="missing_fields", ratio=0.5), random.Random(0))
    assert 0 < len(json.dumps(kept)) < len(json.dumps(DATA)) and kept != DATA


def test_plain_text_variants():
    text = "alpha\nbeta\ngamma\ndelta"
    rng = random.Random(1)
    assert corrupt_text(text, CorruptOptions(variant="truncated_result", max_length=3), rng) == "alp"
    assert corrupt_text(text, CorruptOptions(variant="empty_result"), rng) == ""
    assert json.loads(corrupt_text(text, CorruptOptions(variant="unexpected_nesting"), rng)) == {
        "data": {"text": text}
    }
    assert len(corrupt_text(text, CorruptOptions(variant="missing_fields", ratio=0.5), rng).split("\n")) == 2


@given(
    json_values,
    st.sampled_from(
        [
            "empty_result",
            "missing_fields",
            "null_fields",
            "unexpected_nesting",
            "truncated_result",
            "corrupt_values",
        ]
    ),
)
def test_corruption_handles_any_json(value, variant):
    out = corrupt_text(
        json.dumps(value), CorruptOptions(variant=variant, ratio=0.5, max_length=5), random.Random(0)
    )
    assert isinstance(out, str)


def test_inject_positions():
    opts = InjectToolResultOptions(payload="do {canary}", position="prepend")
    assert inject_text("result", opts, "E-CHAOS-00000001") == "do E-CHAOS-00000001\n\nresult"
    assert inject_text("result", opts.model_copy(update={"position": "replace"}), "C") == "do C"
    assert inject_text("result", InjectToolResultOptions(), "C").startswith("result\n\n")


def test_toolset_change():
    tools = [{"name": "a", "description": "A", "inputSchema": {}}, {"name": "b", "description": "B"}]
    opts = ToolsetChangeOptions(
        remove=["b"], redefine={"a": {"description": "new", "inputSchema": {"type": "object"}}}
    )
    assert change_toolset(tools, opts) == [
        {"name": "a", "description": "new", "inputSchema": {"type": "object"}}
    ]


def faulted(call_id, text):
    return ("FAILED", True) if call_id == "c1" else None


def test_rewrites_per_api():
    anthropic = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": [{"type": "text", "text": "ok"}, {"type": "image", "source": {}}],
                    },
                    {"type": "tool_result", "tool_use_id": "c2", "content": "untouched"},
                ],
            }
        ]
    }
    Anthropic.rewrite_tool_results(anthropic, faulted)
    first, second = anthropic["messages"][0]["content"]
    assert first["content"] == [{"type": "text", "text": "FAILED"}, {"type": "image", "source": {}}]
    assert first["is_error"] is True and second == {
        "type": "tool_result",
        "tool_use_id": "c2",
        "content": "untouched",
    }

    chat = {"messages": [{"role": "tool", "tool_call_id": "c1", "content": "ok"}]}
    OpenAIChat.rewrite_tool_results(chat, faulted)
    assert chat["messages"][0] == {"role": "tool", "tool_call_id": "c1", "content": "FAILED"}

    responses = {"input": [{"type": "function_call_output", "call_id": "c1", "output": "ok"}]}
    OpenAIResponses.rewrite_tool_results(responses, faulted)
    assert responses["input"][0]["output"] == "FAILED"
