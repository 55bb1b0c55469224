"""Severity sweeps: one fault parameter over a list of values, against one shared baseline.

    name: offline-stream-cut
    plan: ../offline-registry-down.yaml   # the task (its faults are replaced by the swept one)
    repeat: 2                             # optional: overrides the plan's repeat
    fault: {id: llm.upstream_5xx, cut_mode: reset}
    parameter: stream_cut_after_chunks
    values: [1, 2, 4, 8, 16]
    break_below: 50                       # the breaking point: the first value scoring below this

Each value is one experiment (the plan with the fault at that value), run as a suite runs its
fault sets: the baseline once, then each value's faulted repetitions. The report draws the
resilience curve, score and every probe's pass rate against the value, with the breaking point.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from mitmchaos.plan import FaultSpec, Parsed, ProbeSpec, Strict, parse_located, read_yaml_file
from mitmchaos.run import RunSettings
from mitmchaos.suite import (
    NAME_PATTERN,
    Experiment,
    ScoredExperiment,
    TaskExpansion,
    baseline_experiment,
    common_overrides,
    run_expansions,
    spec_data,
    task_plan,
    with_faults,
    worst_exit_code,
)

CLIFF_POINTS = 50  # a score drop this large between neighbouring values is a cliff edge, not a slope
FIXED_FIELDS = ("id", "match")  # what a sweep cannot vary: it would be another fault, or other traffic


class Sweep(Strict):
    model_config = ConfigDict(extra="forbid", title="mitmchaos sweep")

    name: str = Field(..., pattern=NAME_PATTERN, description="lowercase letters, digits and hyphens")
    description: str = ""
    plan: str = Field(
        ...,
        min_length=1,
        description="the task's plan file, relative to this file; its faults are replaced by the swept fault",
    )
    repeat: int | None = Field(None, ge=1, le=20, description="overrides the plan's repeat")
    probes: list[ProbeSpec] | None = Field(None, min_length=1, description="replace the plan's probes")  # type: ignore[valid-type]
    fault: FaultSpec  # type: ignore[valid-type]
    parameter: str = Field(
        ..., min_length=1, description="the fault option (or after_calls, times, probability) swept"
    )
    values: list[Any] = Field(..., min_length=2, description="in order of the x axis; each is one experiment")
    break_below: float = Field(
        50, gt=0, le=100, description="the breaking point is the first value scoring below this"
    )


def _slug(value: Any) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(value).lower().replace(".", "p")).strip("-") or "x"


def load_sweep(path: Path, repeat: int | None = None) -> tuple[Sweep, list[TaskExpansion]]:
    """Validate a sweep file (every value against the fault's options) and expand it; PlanError, located."""
    parsed = parse_located(read_yaml_file(path), str(path), Sweep, "sweep")
    sweep: Sweep | None = parsed.value
    if sweep is None:
        parsed.raise_problems()
    faults = _swept_faults(parsed, sweep)
    source = Path(os.path.normpath(path.parent / sweep.plan))
    task = task_plan(parsed, ("plan",), source, common_overrides(sweep, repeat))
    parsed.raise_problems()
    name = task["name"]
    experiments = []
    for value, fault in zip(sweep.values, faults):
        plan_name = f"{name}-{_slug(sweep.parameter)}-{_slug(value)}"
        experiments.append(Experiment(plan_name, name, str(value), with_faults(task, plan_name, [fault])))
    return sweep, [TaskExpansion(name, source, baseline_experiment(name, task, [faults[0]]), experiments)]


def _swept_faults(parsed: Parsed, sweep: Sweep) -> list[dict[str, Any]]:
    """The fault at each value; problems for a parameter the fault does not take or a value it refuses."""
    base = spec_data(sweep.fault)
    allowed = [name for name in type(sweep.fault).model_fields if name not in FIXED_FIELDS]
    if sweep.parameter not in allowed:
        parsed.problems.append(
            parsed.problem_at(
                ("parameter",),
                f"{sweep.fault.id} has no option {sweep.parameter!r} (allowed: {', '.join(allowed)})",
            )
        )
        return []
    adapter = TypeAdapter(FaultSpec)
    faults = []
    for i, value in enumerate(sweep.values):
        fault = {**base, sweep.parameter: value}
        try:
            faults.append(spec_data(adapter.validate_python(fault)))
        except ValidationError as exc:
            reasons = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            parsed.problems.append(
                parsed.problem_at(("values", i), f"{sweep.parameter}={value!r}: {reasons}")
            )
        if value in sweep.values[:i]:
            parsed.problems.append(parsed.problem_at(("values", i), f"{value!r} is listed twice"))
    return faults


# ---------------------------------------------------------------- the curve


@dataclass
class SweepPoint:
    value: Any
    run: ScoredExperiment

    @property
    def score(self) -> float | None:
        return self.run.result.score


@dataclass
class SweepResult:
    name: str
    description: str
    fault: str
    parameter: str
    break_below: float
    points: list[SweepPoint]  # in the file's order

    @property
    def exit_code(self) -> int:
        return worst_exit_code([p.run for p in self.points])

    def breaking_point(self) -> SweepPoint | None:
        """The first value, in the file's order, whose score falls below ``break_below``."""
        return next((p for p in self.points if p.score is not None and p.score < self.break_below), None)

    def steepest_drop(self) -> tuple[SweepPoint, SweepPoint, float] | None:
        """The largest score drop between neighbouring scored values: (from, to, points lost)."""
        scored = [p for p in self.points if p.score is not None]
        drops = [(a, b, a.score - b.score) for a, b in pairwise(scored) if b.score < a.score]
        return max(drops, key=lambda d: d[2], default=None)

    def shape(self) -> str:
        """``cliff-edge`` (one step loses CLIFF_POINTS or more), ``gradual`` (it declines in smaller steps),
        ``flat`` (no value scores lower than the one before)."""
        drop = self.steepest_drop()
        if drop is None:
            return "flat"
        return "cliff-edge" if drop[2] >= CLIFF_POINTS else "gradual"


def run_sweep(
    sweep: Sweep, expansions: list[TaskExpansion], template: RunSettings, out_dir: Path
) -> SweepResult:
    runs = run_expansions(expansions, out_dir, template)
    return SweepResult(
        sweep.name,
        sweep.description,
        sweep.fault.id,
        sweep.parameter,
        sweep.break_below,
        [SweepPoint(value, run) for value, run in zip(sweep.values, runs)],
    )
