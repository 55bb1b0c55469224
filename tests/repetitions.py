"""Hand-written repetitions for the probe, scoring and report tests: events, stdout, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from mitmchaos.records import RepetitionRecord

CANARY = "E-CHAOS-1a2b3c4d"


def event(type: str, ts: float, component: str = "proxy", **fields) -> dict:
    return {"ts": ts, "run_id": "r", "component": component, "type": type, **fields}


def loaded(ts: float, *injects: str, component: str = "proxy") -> dict:
    return event("plan_loaded", ts, component, plan="t", seed=0, repetition=0, canary=CANARY,
                 faults=list(injects), injects=list(injects))


def llm(ts: float, status: int = 200, duration: float = 0.5, faulted: str | None = None, error: str | None = None,
        cost: float | None = 0.01, model: str = "claude-sonnet-4-5", tokens: tuple[int, int] = (100, 20)) -> dict:
    return event("llm_call", ts, provider="anthropic", host="api.anthropic.com", path="/v1/messages",
                 requested_model=model, model=model, status=status, stream=True, stop_reason="end_turn",
                 usage={"input_tokens": tokens[0], "output_tokens": tokens[1], "cache_read_tokens": 0,
                        "cache_write_tokens": 0},
                 cost_usd=cost, duration_s=duration, retry_count=None, faulted=faulted, error=error)


def fault(ts: float, fault_id: str, index: int = 0, **details) -> dict:
    target = {k: details.pop(k) for k in ("host", "model", "tool") if k in details}
    return event("fault_injected", ts, fault=fault_id, fault_index=index, canary=CANARY, target=target,
                 ordinal=0, sampled=0.1, probability=1.0, safety="fail-safe", **details)


def call(ts: float, tool: str, call_id: str, source: str = "model", input: dict | None = None) -> dict:
    from mitmchaos.probes.evidence import tool_key

    return event("tool_call", ts, tool=tool, tool_key=tool_key(tool), call_id=call_id, input=input or {},
                 source=source)


def result(ts: float, tool: str, call_id: str, ok: bool = True, error: str | None = None,
           source: str = "model") -> dict:
    from mitmchaos.probes.evidence import tool_key

    return event("tool_result", ts, tool=tool, tool_key=tool_key(tool), call_id=call_id, ok=ok, error=error,
                 source=source)


def decision(ts: float, kind: str, action: str, mode: str | None = None, **fields) -> dict:
    return event("decision", ts, kind=kind, action=action, mode=mode, **fields)


def write_repetition(root: Path, phase: str, index: int, events: list[dict], stdout: str = "",
                     verify_exit: int | None = 0, agent_exit: int | None = 0, duration_s: float = 10.0,
                     malformed: list[str] = (), abort: dict | None = None, error: str | None = None) -> RepetitionRecord:
    artifacts = root / f"{phase}-{index + 1}"
    artifacts.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(e) for e in events] + list(malformed)
    (artifacts / "events.jsonl").write_text("\n".join(lines) + "\n")
    (artifacts / "agent.out").write_text(stdout)
    return RepetitionRecord(index=index, phase=phase, run_id=f"{phase}-{index}", canary=CANARY,
                            artifacts=artifacts, agent_exit=agent_exit, verify_exit=verify_exit,
                            duration_s=duration_s, abort=abort, error=error)
