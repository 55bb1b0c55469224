"""What a probe sees of one repetition, read once from its artifacts.

``build_evidence`` streams the events file (``iter_events``) and keeps only compact
projections of the event types the probes read, so a repetition with a million event
lines costs memory for its model and tool calls, not for every line. Reading files
happens here and nowhere in the probes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from mitmchaos.decisions import is_canary
from mitmchaos.events import iter_events
from mitmchaos.probes.cost import repetition_cost
from mitmchaos.records import RepetitionRecord


def tool_key(name: str | None) -> str:
    """``mcp__server__tool`` and ``tool`` are the same tool."""
    if not name:
        return ""
    if name.startswith("mcp__") and name.count("__") >= 2:
        return name.rsplit("__", 1)[1]
    return name


@dataclass(slots=True)
class LlmCall:
    start: float
    end: float
    status: int | None
    model: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    faulted: str | None  # the fault id that hit this call
    error: str | None

    @property
    def failed(self) -> bool:
        return self.error is not None or self.status is None or self.status >= 400


@dataclass(slots=True)
class FaultHit:
    ts: float
    fault: str
    fault_index: int | None
    host: str | None
    model: str | None
    tool: str | None
    status: int | None
    retry_after_s: float | None
    stream_cut: bool
    tool_call_id: str | None

    @property
    def family(self) -> str:
        return self.fault.split(".", 1)[0]

    @property
    def target(self) -> str:
        return self.tool or self.host or self.model or ""


@dataclass(slots=True)
class ToolCall:
    ts: float
    tool: str
    tool_key: str
    call_ids: list[str]
    source: str
    carries_canary: bool
    ok: bool | None = None  # None: no result was seen
    executed: bool = False  # an MCP or gate event for this model-requested call was merged in


@dataclass(slots=True)
class Decision:
    ts: float
    kind: str
    action: str | None
    mode: str | None
    subject: str | None
    reason: str | None


@dataclass(frozen=True)
class JudgeVerdict:
    score: float | None  # None: the judge could not be asked; ``reason`` says why
    reason: str


@dataclass
class Evidence:
    """One repetition as the probes see it."""

    phase: str
    index: int
    run_id: str
    canary: str
    stdout: str
    agent_exit: int | None
    verify_exit: int | None
    duration_s: float
    aborted: bool  # an abort condition or a runner error stopped it before the agent exited
    baseline_cost: float | None = None  # the mean baseline cost; None without baseline repetitions
    prices: dict[str, Any] = field(default_factory=dict)  # the plan's prices by model glob
    started: float | None = None
    llm_calls: list[LlmCall] = field(default_factory=list)
    faults: list[FaultHit] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    destructive: list[Decision] = field(default_factory=list)
    policy_blocks: list[Decision] = field(default_factory=list)  # enforce-mode policy blocks only
    loaded: list[tuple[str, list[str]]] = field(default_factory=list)  # (component, fault ids it injects)
    malformed: int = 0
    cost_usd: float = 0.0  # the model calls' summed cost (``repetition_cost`` with the plan's prices)
    unpriced: list[str] = field(default_factory=list)  # models nothing priced, left out of cost_usd
    judgements: dict[str, JudgeVerdict] = field(default_factory=dict)  # filled by scoring, keyed by judge_key

    def figures(self) -> Evidence:
        """This repetition without its per-event lists, the part that grows with the events file."""
        return replace(self, llm_calls=[], faults=[], tool_calls=[], destructive=[], policy_blocks=[], loaded=[])


# Parsed JSON holds exact ints and floats, so a type identity check (cheaper than isinstance,
# per line) tells numbers from booleans.
def _int(value: Any) -> int:
    return value if type(value) is int else 0


def _num(value: Any) -> float | None:
    kind = type(value)
    return float(value) if kind is float or kind is int else None


_input_text = json.JSONEncoder(default=str).encode  # json.dumps(..., default=str), its encoder made once


def _holds(value: Any, text: str) -> bool:
    """Whether a parsed JSON value holds ``text`` in one of its strings, keys included."""
    kind = type(value)
    if kind is str:
        return text in value
    if kind is dict:  # loops, not any(): no generator to make per tool call
        for key, item in value.items():
            if text in key or _holds(item, text):
                return True
    elif kind is list:
        for item in value:
            if _holds(item, text):
                return True
    return False


class _ToolCalls:
    """Merges the events of one tool call into one ``ToolCall``.

    A call the model asked for (source ``model``) is often seen again where it runs: as an
    MCP ``tools/call`` or by a gate. That execution is merged into the oldest model call of
    the same tool not yet executed, so every call is counted once.
    """

    def __init__(self, canary: str):
        self.canary = canary
        # A canary as the runner makes them is in an input's JSON text exactly when it is in one of
        # its strings (JSON writes its characters as they are; no escape or number starts with "E"
        # or holds "C"), so the strings are searched instead of each input serialised.
        self.plain_canary = is_canary(canary)
        self.calls: list[ToolCall] = []
        self.by_id: dict[str, ToolCall] = {}
        self.unexecuted: dict[str, list[ToolCall]] = {}

    def add(self, event: dict[str, Any], ts: float) -> None:
        get = event.get
        name = str(get("tool") or "")
        key = str(get("tool_key") or tool_key(name))
        call_id = get("call_id")
        if call_id is not None:
            call_id = str(call_id)
            if call_id in self.by_id:
                return
        source = str(get("source") or "model")
        waiting = self.unexecuted.get(key)
        if source != "model" and waiting:
            call = waiting.pop(0)
            call.executed = True
        else:
            call = ToolCall(ts, name, key, [], source, self.carries_canary(get("input")))
            self.calls.append(call)
            if source == "model":
                self.unexecuted.setdefault(key, []).append(call)
        if call_id is not None:
            call.call_ids.append(call_id)
            self.by_id[call_id] = call

    def carries_canary(self, tool_input: Any) -> bool:
        if not self.canary or tool_input is None:
            return False
        if self.plain_canary:
            return _holds(tool_input, self.canary)
        return self.canary in _input_text(tool_input)

    def result(self, event: dict[str, Any]) -> None:
        call = self.by_id.get(str(event.get("call_id")))
        if call is None:
            key = str(event.get("tool_key") or tool_key(event.get("tool")))
            call = next((c for c in reversed(self.calls) if c.tool_key == key and c.ok is None), None)
        if call is not None:
            call.ok = bool(event.get("ok"))


def llm_call_from_event(event: dict[str, Any], end: float) -> LlmCall:
    """An ``llm_call`` event as a call; its ``ts`` (``end``) is written when the call ended."""
    get = event.get
    usage = get("usage")
    if type(usage) is not dict:
        usage = {}
    status = get("status")
    return LlmCall(  # positionally, in field order: this runs for every model call of a run
        end - (_num(get("duration_s")) or 0.0), end, status if type(status) is int else None,
        get("model") or get("requested_model"), _int(usage.get("input_tokens")), _int(usage.get("output_tokens")),
        _int(usage.get("cache_read_tokens")), _int(usage.get("cache_write_tokens")), _num(get("cost_usd")),
        get("faulted") or None, get("error") or None,
    )


def build_evidence(record: RepetitionRecord, *, baseline_cost: float | None = None,
                   prices: dict[str, Any] | None = None) -> Evidence:
    ev = Evidence(
        phase=record.phase, index=record.index, run_id=record.run_id, canary=record.canary,
        stdout=record.agent_output(), agent_exit=record.agent_exit, verify_exit=record.verify_exit,
        duration_s=record.duration_s, aborted=record.abort is not None or record.error is not None,
        baseline_cost=baseline_cost, prices=dict(prices or {}),
    )
    if record.events_path.exists():
        _read(ev, record)
    # Components append concurrently; order by when things happened.
    ev.llm_calls.sort(key=lambda call: call.start)
    ev.faults.sort(key=lambda hit: hit.ts)
    ev.tool_calls.sort(key=lambda call: call.ts)
    ev.cost_usd, ev.unpriced = repetition_cost(ev.llm_calls, ev.prices)
    return ev


def _read(ev: Evidence, record: RepetitionRecord) -> None:
    """One pass over the events file, each event handed to what its type feeds."""
    tools = _ToolCalls(record.canary)
    llm_calls = ev.llm_calls
    started = None
    for event in iter_events(record.events_path):
        if event is None:
            ev.malformed += 1
            continue
        ts = _num(event["ts"]) or 0.0
        if started is None or ts < started:
            started = ts
        kind = event["type"]
        if kind == "llm_call":
            llm_calls.append(llm_call_from_event(event, ts))
        elif kind == "tool_call":
            tools.add(event, ts)
        elif kind == "tool_result":
            tools.result(event)
        elif kind == "fault_injected":
            ev.faults.append(_fault_hit(event, ts))
        elif kind == "decision":
            _decision(ev, event, ts)
        elif kind == "plan_loaded":
            ev.loaded.append(_loaded(event))
    ev.started = started
    ev.tool_calls = tools.calls


def _fault_hit(event: dict[str, Any], ts: float) -> FaultHit:
    target = event.get("target") if isinstance(event.get("target"), dict) else {}
    index = event.get("fault_index")
    return FaultHit(
        ts=ts, fault=str(event.get("fault") or ""), fault_index=index if isinstance(index, int) else None,
        host=target.get("host"), model=target.get("model"), tool=target.get("tool"),
        status=event.get("status") if isinstance(event.get("status"), int) else None,
        retry_after_s=_num(event.get("retry_after_s")),
        stream_cut=event.get("cut_after_chunks") is not None,
        tool_call_id=str(event["tool_call_id"]) if event.get("tool_call_id") is not None else None,
    )


def _decision(ev: Evidence, event: dict[str, Any], ts: float) -> None:
    decision = Decision(ts, str(event.get("kind")), event.get("action"), event.get("mode"),
                        event.get("host") or event.get("tool"), event.get("reason") or event.get("rule"))
    if decision.kind == "destructive":
        ev.destructive.append(decision)
    elif decision.kind == "policy" and decision.action == "block" and decision.mode == "enforce":
        ev.policy_blocks.append(decision)


def _loaded(event: dict[str, Any]) -> tuple[str, list[str]]:
    injects = event.get("injects")
    return str(event.get("component")), list(injects) if isinstance(injects, list) else []
