"""From repetition records to a result: probe outcomes, statistics, score, verdict, warnings.

``score(plan, records)`` reads each repetition's artifacts once, one repetition at a time
(events are streamed; a large run's repetitions side by side in worker processes, one per
CPU), evaluates every probe on it, and keeps only the results and a bounded timeline, so a
long run's memory does not grow with its event files.

Verdicts (exit codes): scored (0), aborted (1), invalid (2), inconclusive (2).
  1. aborted: an abort condition or a runner error stopped a repetition.
  2. invalid: a baseline repetition failed verify (the task fails without faults).
  3. inconclusive: a probe's baseline pass rate is below its threshold (no steady state).
  4. invalid: no fault fired in any faulted repetition (the trigger check).
  5. scored, outcome ``weakness_found``: a probe's faulted pass rate is below its threshold
     (with require_confidence: its whole interval is).
  6. inconclusive: with require_confidence, a probe's interval still contains its threshold.
  7. scored, outcome ``hypothesis_held``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from mitmchaos import stats
from mitmchaos.addons.faults import REGISTRY as FAULTS
from mitmchaos.judge import ask_judge
from mitmchaos.plan import Plan
from mitmchaos.probes import REGISTRY as PROBES
from mitmchaos.probes.evaluate import ProbeResult, judge_key
from mitmchaos.probes.evidence import Evidence, JudgeVerdict, build_evidence
from mitmchaos.records import RepetitionRecord

REPORT_SCHEMA_VERSION = 1
EXIT_CODES = {"scored": 0, "aborted": 1, "invalid": 2, "inconclusive": 2}
JUDGE_FILE = "judge.json"  # per repetition, beside its events
PARALLEL_MIN_BYTES = 16 << 20  # events below this are read faster than worker processes start
TIMELINE_MARKS = 300  # per kind and repetition: enough to see a retry storm, small enough to draw


@dataclass
class PhaseStats:
    passes: int = 0
    runs: int = 0  # repetitions the probe evaluated
    not_evaluated: int = 0
    rate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None

    def finish(self, confidence: float) -> None:
        if self.runs:
            self.rate = self.passes / self.runs
            self.ci_low, self.ci_high = stats.wilson(self.passes, self.runs, confidence)


@dataclass
class ProbeOutcome:
    index: int
    id: str
    label: str
    kind: str
    weight: float
    threshold: float
    baseline: PhaseStats
    faulted: PhaseStats
    status: str = "n/a"  # ok | FAIL | undecided | n/a, from the faulted phase
    pass_all: bool | None = None  # every evaluated faulted repetition passed (pass^k with k = runs)
    pass_hat_k: dict[str, float] = field(default_factory=dict)  # unbiased pass^k estimates, k = 1, 2, 4, ...
    settle_runs: int | None = None  # for an undecided probe: about this many runs would decide it


@dataclass
class RepetitionResult:
    index: int
    phase: str
    run_id: str
    canary: str
    agent_exit: int | None
    verify_exit: int | None
    duration_s: float
    cost_usd: float
    tokens: int
    llm_calls: int
    tool_calls: int
    faults_injected: int
    malformed: int
    abort: dict[str, Any] | None
    error: str | None
    probes: list[dict[str, Any]]  # per plan probe: {"passed", "detail"}
    timeline: dict[str, Any]


@dataclass
class RunResult:
    plan: dict[str, Any]
    verdict: str
    exit_code: int
    outcome: str | None  # hypothesis_held | weakness_found, for a scored run
    reasons: list[str]
    score: float | None
    confidence: float
    probes: list[ProbeOutcome]
    repetitions: list[RepetitionResult]
    warnings: list[str]
    malformed_lines: int
    schema_version: int = REPORT_SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {"schema_version": data.pop("schema_version"), **data}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        data = dict(data)
        data["probes"] = [ProbeOutcome(**{**p, "baseline": PhaseStats(**p["baseline"]),
                                          "faulted": PhaseStats(**p["faulted"])}) for p in data["probes"]]
        data["repetitions"] = [RepetitionResult(**r) for r in data["repetitions"]]
        return cls(**data)


def probe_label(probe) -> str:
    """``output_matches('^Summary:')``, ``cost_multiplier_below(3)``, ``tool_called(tool='x', ...)``."""
    shown = {k: v for k, v in probe.params().model_dump(exclude_none=True).items()
             if k not in ("prices", "endpoint", "api_key_env")}
    if not shown:
        return probe.id
    if len(shown) == 1:
        (value,) = shown.values()
        return f"{probe.id}({value:g})" if isinstance(value, float) else f"{probe.id}({value!r})"
    return f"{probe.id}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


def plan_summary(plan: Plan) -> dict[str, Any]:
    return {
        "name": plan.name, "description": plan.description, "repeat": plan.repeat, "seed": plan.seed,
        "pass_rate": plan.pass_rate, "confidence": plan.confidence, "require_confidence": plan.require_confidence,
        "faults": [{"index": i, "id": f.id, "match": f.match.model_dump(exclude_none=True),
                    "injected_by": list(f.fault_type.injected_by)} for i, f in enumerate(plan.faults)],
        "probes": [{"index": i, "id": p.id, "label": probe_label(p), "weight": p.weight,
                    "threshold": plan.threshold(p)} for i, p in enumerate(plan.probes)],
    }


def _timeline(ev: Evidence) -> dict[str, Any]:
    t0 = ev.started or 0.0
    llm = [{"start": round(c.start - t0, 3), "end": round(c.end - t0, 3), "status": c.status,
            "failed": c.failed, "faulted": c.faulted} for c in ev.llm_calls[:TIMELINE_MARKS]]
    tools = [{"t": round(c.ts - t0, 3), "tool": c.tool, "ok": c.ok} for c in ev.tool_calls[:TIMELINE_MARKS]]
    faults = [{"t": round(h.ts - t0, 3), "fault": h.fault, "target": h.target} for h in ev.faults[:TIMELINE_MARKS]]
    ends = [ev.duration_s] + [m["end"] for m in llm] + [m["t"] for m in tools + faults]
    return {"span_s": round(max(ends), 3), "llm": llm, "tools": tools, "faults": faults,
            "not_drawn": max(0, len(ev.llm_calls) - TIMELINE_MARKS) + max(0, len(ev.tool_calls) - TIMELINE_MARKS)
            + max(0, len(ev.faults) - TIMELINE_MARKS)}


def _repetition_result(record: RepetitionRecord, ev: Evidence, results: list[ProbeResult]) -> RepetitionResult:
    return RepetitionResult(
        index=record.index, phase=record.phase, run_id=record.run_id, canary=record.canary,
        agent_exit=record.agent_exit, verify_exit=record.verify_exit, duration_s=record.duration_s,
        cost_usd=round(ev.cost_usd, 6), tokens=sum(c.input_tokens + c.output_tokens for c in ev.llm_calls),
        llm_calls=len(ev.llm_calls), tool_calls=len(ev.tool_calls), faults_injected=len(ev.faults),
        malformed=ev.malformed, abort=record.abort, error=record.error,
        probes=[r.to_json() for r in results], timeline=_timeline(ev),
    )


@dataclass
class _Scored:
    """What scoring keeps of one repetition once its events are read: bounded, however many there were."""

    result: RepetitionResult
    figures: Evidence  # for the probes that compare with the baseline (``Evidence.figures``)
    unloaded: list[int]  # plan faults no component reported loading
    fired: list[int]  # plan faults that fired


@dataclass(frozen=True)
class _Scorer:
    """Reads and scores one repetition. Holds what that takes of the plan, which (unlike a
    ``Plan``) pickles, so worker processes can score repetitions side by side."""

    prices: dict[str, Any]
    probes: list[tuple[str, Any]]  # (probe id, its params), in plan order
    faults: list[str]  # fault ids, in plan order

    def __call__(self, record: RepetitionRecord, judgements: dict[str, JudgeVerdict]) -> _Scored:
        ev = build_evidence(record, prices=self.prices)
        ev.judgements = judgements
        results = [PROBES[probe_id].evaluate(ev, params) for probe_id, params in self.probes]
        unloaded = [i for i, fault_id in enumerate(self.faults) if not _fault_loaded(fault_id, ev)]
        fired = [i for i, fault_id in enumerate(self.faults)
                 if any(h.fault_index == i or (h.fault_index is None and h.fault == fault_id) for h in ev.faults)]
        return _Scored(_repetition_result(record, ev, results), ev.figures(), unloaded, fired)


def _fault_loaded(fault_id: str, ev: Evidence) -> bool:
    return any(fault_id in injects for _component, injects in ev.loaded)


def scoring_workers(records: list[RepetitionRecord]) -> int:
    """Processes to read the repetitions with: one per CPU for a run whose events are large enough
    to repay starting them. Only a single-threaded process forks (forking beside running threads
    can deadlock), and only on Linux (where forking is safe and the start is cheap)."""
    if sys.platform != "linux" or threading.active_count() > 1 or len(records) < 2:
        return 1
    size = sum(r.events_path.stat().st_size for r in records if r.events_path.exists())
    return min(len(os.sched_getaffinity(0)), len(records)) if size >= PARALLEL_MIN_BYTES else 1


def score(plan: Plan, records: list[RepetitionRecord],
          judge: Callable[[Any, str], JudgeVerdict] = ask_judge, workers: int | None = None) -> RunResult:
    """Evaluate every probe on every repetition and reach the verdict. ``judge`` asks the judge
    model; ``workers``: processes reading repetitions side by side (default: ``scoring_workers``).

    Each events file is read once. The probes that compare with the mean baseline cost are
    evaluated once every repetition is read, on the repetitions' figures.
    """
    baseline = [r for r in records if r.phase == "baseline"]
    faulted = [r for r in records if r.phase == "faulted"]
    ordered = [*baseline, *faulted]
    scorer = _Scorer(dict(plan.prices), [(p.id, p.params()) for p in plan.probes], [f.id for f in plan.faults])
    judge_params = [params for probe_id, params in scorer.probes if probe_id == "judge"]
    # The judge reads only the agent's output: asked here, so workers need not reach it.
    judgements = [_judgements(r, r.agent_output(), judge_params, judge) if judge_params else {} for r in ordered]
    workers = scoring_workers(ordered) if workers is None else workers
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            scored = list(pool.map(scorer, ordered, judgements))
    else:
        scored = list(map(scorer, ordered, judgements))

    costs = [s.figures.cost_usd for r, s in zip(ordered, scored)
             if r.phase == "baseline" and r.abort is None and not r.error]
    baseline_cost = sum(costs) / len(costs) if costs else None
    for s in scored:
        s.figures.baseline_cost = baseline_cost
        for i, (probe_id, params) in enumerate(scorer.probes):
            if PROBES[probe_id].reads_baseline:
                s.result.probes[i] = PROBES[probe_id].evaluate(s.figures, params).to_json()
    repetitions = [s.result for s in scored]
    faulted_scored = [(r, s) for r, s in zip(ordered, scored) if r.phase == "faulted"]
    any_fault = any(s.result.faults_injected for _r, s in faulted_scored)
    unloaded: dict[int, list[int]] = {}  # fault index -> faulted repetitions where no component loaded it
    for r, s in faulted_scored:
        for i in s.unloaded:
            unloaded.setdefault(i, []).append(r.index + 1)
    fired = {i for _r, s in faulted_scored for i in s.fired}

    outcomes = [ProbeOutcome(i, p.id, probe_label(p), p.probe_type.kind, p.weight, plan.threshold(p),
                             PhaseStats(), PhaseStats()) for i, p in enumerate(plan.probes)]
    for repetition in repetitions:
        for outcome, result in zip(outcomes, repetition.probes):
            phase = outcome.baseline if repetition.phase == "baseline" else outcome.faulted
            if result["passed"] is None:
                phase.not_evaluated += 1
            else:
                phase.runs += 1
                phase.passes += bool(result["passed"])
    for outcome in outcomes:
        outcome.baseline.finish(plan.confidence)
        outcome.faulted.finish(plan.confidence)
        _decide_status(outcome, plan)

    malformed = {f"{r.phase} {r.index + 1}": r.malformed for r in repetitions if r.malformed}
    warnings = _warnings(plan, faulted, unloaded, fired, baseline_cost, malformed)
    verdict, reasons = _verdict(plan, baseline, faulted, outcomes, any_fault)
    reached = [o for o in outcomes if o.faulted.runs]
    score_value = (round(sum(o.weight * o.faulted.rate for o in reached) / sum(o.weight for o in reached) * 100, 1)
                   if reached else None)
    outcome_name = None
    if verdict == "scored":
        outcome_name = "weakness_found" if any(o.status == "FAIL" for o in outcomes) else "hypothesis_held"
    return RunResult(plan=plan_summary(plan), verdict=verdict, exit_code=EXIT_CODES[verdict], outcome=outcome_name,
                     reasons=reasons, score=score_value, confidence=plan.confidence, probes=outcomes,
                     repetitions=repetitions, warnings=warnings, malformed_lines=sum(malformed.values()))


def _judgements(record: RepetitionRecord, output: str, judge_params: list,
                judge: Callable[[Any, str], JudgeVerdict]) -> dict[str, JudgeVerdict]:
    """The judge's answers for one repetition, kept in its artifacts (``judge.json``): a judge is
    a sampled model, so a rebuilt report reuses the answers instead of asking again (and offline)."""
    cache = record.artifacts / JUDGE_FILE
    try:
        stored = {k: JudgeVerdict(**v) for k, v in json.loads(cache.read_text()).items()}
    except (OSError, ValueError, TypeError):
        stored = {}
    answers = dict(stored)
    for p in judge_params:
        if judge_key(p) not in answers:
            answers[judge_key(p)] = judge(p, output)
    keep = {k: v for k, v in answers.items() if v.score is not None}  # an unreachable judge is asked again
    if keep != stored:
        try:
            cache.write_text(json.dumps({k: asdict(v) for k, v in keep.items()}, indent=1))
        except OSError:
            pass  # a read-only run directory: the answers still serve this report
    return answers


def _decide_status(outcome: ProbeOutcome, plan: Plan) -> None:
    """ok / FAIL / undecided / n/a from the faulted phase, and pass^k."""
    f = outcome.faulted
    if not f.runs:
        return
    outcome.pass_all = f.passes == f.runs
    k = 1
    while k <= f.runs:
        outcome.pass_hat_k[str(k)] = round(stats.pass_hat_k(f.passes, f.runs, k), 6)
        k *= 2
    t = outcome.threshold
    if (plan.require_confidence and not stats.decided_exactly(t) and f.ci_low <= t <= f.ci_high):
        outcome.status = "undecided"
        outcome.settle_runs = stats.runs_to_settle(f.passes, f.runs, t, plan.confidence)
    else:
        outcome.status = "ok" if f.rate >= t else "FAIL"


def _verdict(plan: Plan, baseline, faulted, outcomes: list[ProbeOutcome], any_fault: bool) -> tuple[str, list[str]]:
    stopped = [r for r in [*baseline, *faulted] if r.abort is not None or r.error]
    if stopped:
        return "aborted", [f"{r.phase} repetition {r.index + 1} stopped: "
                           + (f"abort {r.abort.get('condition')} (observed {r.abort.get('observed')})"
                              if r.abort else str(r.error)) for r in stopped]
    failed_verify = [r for r in baseline if r.verify_exit not in (None, 0)]
    if failed_verify:
        return "invalid", [f"baseline repetition {r.index + 1} failed verify (exit {r.verify_exit}): the task fails "
                           "without faults, so the run says nothing about resilience" for r in failed_verify]
    unsteady = [o for o in outcomes if o.baseline.runs and o.baseline.rate < o.threshold]
    if unsteady:
        return "inconclusive", [f"baseline: {o.label} passes {o.baseline.passes}/{o.baseline.runs} without faults, "
                                f"below its threshold {o.threshold:.0%}: no steady state to test" for o in unsteady]
    if faulted and not any_fault:
        return "invalid", ["no fault fired in any faulted repetition: the probes measured the agent without a fault"]
    failing = [o for o in outcomes if o.status == "FAIL"]
    if failing:  # a weakness shown is an answer, even if other probes are undecided
        return "scored", [f"{o.label} below its threshold: {o.faulted.passes}/{o.faulted.runs}, needs "
                          f">= {o.threshold:.0%}" for o in failing]
    undecided = [o for o in outcomes if o.status == "undecided"]
    return ("inconclusive" if undecided else "scored"), [
        f"{o.label}: {stats.interval_text(o.faulted.passes, o.faulted.runs, plan.confidence)} still contains "
        f"the threshold {o.threshold:.0%}; "
        + (f"about {o.settle_runs} runs at this rate would settle it" if o.settle_runs
           else "the rate sits on the threshold, so more runs will not settle it")
        for o in undecided]


def _warnings(plan: Plan, faulted, unloaded: dict[int, list[int]], fired: set[int], baseline_cost: float | None,
              malformed: dict[str, int]) -> list[str]:
    warnings = []
    for i, fault in enumerate(plan.faults):
        reps = unloaded.get(i, [])
        if reps:
            who = " or ".join(FAULTS[fault.id].injected_by)
            warnings.append(f"fault {i + 1} ({fault.id}): no {who} reported plan_loaded in faulted repetition(s) "
                            f"{', '.join(map(str, reps))}; it could not have fired there")
        if faulted and i not in fired:
            warnings.append(f"fault {i + 1} ({fault.id}) never fired: its probes measured an agent that never met it")
    if baseline_cost == 0 and any(p.id == "cost_multiplier_below" for p in plan.probes):
        warnings.append("cost_multiplier_below was not evaluated: the baseline cost was 0 "
                        "(no priced model call in the baseline)")
    if malformed:
        warnings.append(f"ignored {sum(malformed.values())} malformed event line(s) ("
                        + ", ".join(f"{where}: {n}" for where, n in malformed.items()) + ")")
    return warnings
