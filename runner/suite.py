"""Suites: several fault sets (and tasks) scored against one shared baseline per task.

    name: offline-single-points
    repeat: 2                                # optional: overrides every task plan's repeat
    tasks:
      - plan: ../offline-registry-down.yaml  # agent, verify, probes, stand-ins, abort: the task
    fault_sets:
      - name: registry-down
        faults: [{id: egress.dns_fail, match: {host: pypi.example.test}}]
      - name: model-overloaded
        faults: [{id: llm.upstream_5xx, status: 529}]

The file expands to tasks × fault sets: each task's plan with its faults replaced by a fault
set's. The no-fault baseline runs once per task, and every fault set of that task is scored
against it, so N fault sets cost one baseline, not N. Sweeps (sweep.py) expand and run the
same way, one fault parameter per experiment instead of one fault set.
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict, Field

from mitmchaos.plan import (
    FaultSpec,
    Parsed,
    PlanError,
    ProbeSpec,
    Strict,
    load_plan,
    parse_located,
    read_yaml_file,
)
from mitmchaos.records import Phase, RepetitionRecord
from mitmchaos.run import RunSettings, absolute_stand_in_paths, execute, runner_warnings
from mitmchaos.scoring import ProbeOutcome, RunResult

NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"


class SuiteTask(Strict):
    plan: str = Field(
        ...,
        min_length=1,
        description="the task's plan file, relative to this file; its faults are "
        "replaced by each fault set's",
    )
    name: str | None = Field(None, pattern=NAME_PATTERN, description="default: the plan's name")


class FaultSet(Strict):
    name: str = Field(..., pattern=NAME_PATTERN, description="lowercase letters, digits and hyphens")
    description: str = ""
    faults: list[FaultSpec] = Field(..., min_length=1)  # type: ignore[valid-type]


class Suite(Strict):
    model_config = ConfigDict(extra="forbid", title="mitmchaos suite")

    name: str = Field(..., pattern=NAME_PATTERN, description="lowercase letters, digits and hyphens")
    description: str = ""
    repeat: int | None = Field(None, ge=1, le=20, description="overrides every task plan's repeat")
    probes: list[ProbeSpec] | None = Field(None, min_length=1, description="replace every task plan's probes")  # type: ignore[valid-type]
    tasks: list[SuiteTask] = Field(..., min_length=1)
    fault_sets: list[FaultSet] = Field(..., min_length=1)


# ---------------------------------------------------------------- expansion


@dataclass
class Experiment:
    name: str  # the generated plan's name
    task: str
    label: str  # the fault set's name, or the swept value
    plan: dict[str, Any]  # plan data: the task's, with these faults


@dataclass
class TaskExpansion:
    task: str
    source: Path  # the task's plan file
    baseline: Experiment  # runs the baseline phase only
    experiments: list[Experiment]  # each runs the faulted phase only and is scored with the baseline


def task_plan(parsed: Parsed, loc: tuple, path: Path, overrides: dict[str, Any]) -> dict[str, Any] | None:
    """A task's plan data (the file named at ``loc``), stand-in paths absolute, with the file's ``overrides``
    (those not None); None, with problems, if the plan is unusable."""
    if not path.is_file():
        parsed.problems.append(parsed.problem_at(loc, f"no plan file {str(path)!r}"))
        return None
    try:
        load_plan(path)
    except PlanError as exc:  # located in the task's own file
        parsed.problems.extend(exc.problems)
        return None
    data = absolute_stand_in_paths(yaml.safe_load(read_yaml_file(path)), path.resolve().parent)
    data.update({key: value for key, value in overrides.items() if value is not None})
    return data


def common_overrides(spec: Strict, repeat: int | None) -> dict[str, Any]:
    """What a suite or sweep file (or the command line, for repeat) sets for every task."""
    probes = [spec_data(p) for p in spec.probes] if spec.probes else None
    return {"repeat": repeat or spec.repeat, "probes": probes}


def with_faults(task: dict[str, Any], name: str, faults: list[dict[str, Any]]) -> dict[str, Any]:
    return {**copy.deepcopy(task), "name": name, "faults": copy.deepcopy(faults)}


def baseline_experiment(task: str, data: dict[str, Any], faults: list[dict[str, Any]]) -> Experiment:
    """Any of the task's fault sets will do: in the baseline phase no fault fires."""
    return Experiment(f"{task}-baseline", task, "baseline", with_faults(data, f"{task}-baseline", faults))


def spec_data(spec: FaultSpec | ProbeSpec) -> dict[str, Any]:
    """A validated fault or probe as plan data: the fields the file gave, id first."""
    data = spec.model_dump(mode="json", exclude_unset=True)
    return {"id": data.pop("id"), **data}


def expand_suite(suite: Suite, tasks: list[tuple[str, Path, dict[str, Any]]]) -> list[TaskExpansion]:
    """tasks (name, plan file, plan data) × fault sets, with one baseline per task: its plan, whose faults
    never fire in the baseline phase."""
    sets = [(fs.name, [spec_data(f) for f in fs.faults]) for fs in suite.fault_sets]
    return [
        TaskExpansion(
            task,
            source,
            baseline_experiment(task, data, sets[0][1]),
            [
                Experiment(f"{task}-{label}", task, label, with_faults(data, f"{task}-{label}", faults))
                for label, faults in sets
            ],
        )
        for task, source, data in tasks
    ]


def load_suite(path: Path, repeat: int | None = None) -> tuple[Suite, list[TaskExpansion]]:
    """Validate a suite file (and its task plans) and expand it; PlanError lists every problem, located."""
    parsed = parse_located(read_yaml_file(path), str(path), Suite, "suite")
    suite: Suite | None = parsed.value
    if suite is None:
        parsed.raise_problems()
    tasks = []
    for i, task in enumerate(suite.tasks):
        source = Path(os.path.normpath(path.parent / task.plan))
        data = task_plan(parsed, ("tasks", i, "plan"), source, common_overrides(suite, repeat))
        if data is not None:
            tasks.append((task.name or data["name"], source, data))
    _no_duplicates(parsed, [name for name, _, _ in tasks], "tasks", "name", "task")
    _no_duplicates(parsed, [fs.name for fs in suite.fault_sets], "fault_sets", "name", "fault set")
    parsed.raise_problems()
    return suite, expand_suite(suite, tasks)


def _no_duplicates(parsed: Parsed, names: list[str], field: str, key: str, noun: str) -> None:
    for i, name in enumerate(names):
        if name in names[:i]:
            parsed.problems.append(
                parsed.problem_at((field, i, key), f"{noun} {name!r} is named twice; names must be unique")
            )


# ---------------------------------------------------------------- running


@dataclass
class ScoredExperiment:
    experiment: Experiment
    result: RunResult
    report: Path  # its JSON report; the other formats are beside it


def run_expansions(
    expansions: list[TaskExpansion], out_dir: Path, template: RunSettings
) -> list[ScoredExperiment]:
    """Each task's baseline once, then each experiment's faulted repetitions, scored with that baseline.

    Every experiment gets its own run directory (``mitmchaos report`` works on it) and reports.
    A baseline that does not hold (aborted, failed verify) ends its task's experiments early:
    each is scored on the baseline alone, which gives it that verdict.
    """
    total = sum(len(t.experiments) for t in expansions)
    done = 0
    scored = []
    for task in expansions:
        _say(template, f"task {task.task}: the shared baseline")
        baseline = _execute(task.baseline, ("baseline",), out_dir, template)
        held = not baseline.invalid_baseline and not any(r.abort or r.error for r in baseline.records)
        for experiment in task.experiments:
            done += 1
            _say(
                template,
                f"{done}/{total} {experiment.name}"
                + ("" if held else ": not run, the baseline did not hold"),
            )
            if held:
                outcome = _execute(experiment, ("faulted",), out_dir, template)
                plan_path, records = outcome.plan_path, baseline.records + outcome.records
                warnings = runner_warnings(outcome)
            else:
                plan_path, records, warnings = _write_plan(experiment, out_dir), baseline.records, []
            scored.append(_score(experiment, plan_path, records, warnings, out_dir))
    return scored


def _write_plan(experiment: Experiment, out_dir: Path) -> Path:
    # outside the project: a run needs its working tree clean
    path = out_dir / "plans" / f"{experiment.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(experiment.plan, sort_keys=False))
    return path


def _execute(experiment: Experiment, phases: tuple[Phase, ...], out_dir: Path, template: RunSettings):
    settings = replace(
        template,
        plan_path=_write_plan(experiment, out_dir),
        out=out_dir / f"{experiment.name}.json",
        phases=phases,
    )
    return execute(settings)


def _score(
    experiment: Experiment,
    plan_path: Path,
    records: list[RepetitionRecord],
    warnings: list[str],
    out_dir: Path,
) -> ScoredExperiment:
    from mitmchaos.report import write_reports
    from mitmchaos.rundir import save_run
    from mitmchaos.scoring import score

    run_dir = out_dir / experiment.name
    # stored relative to the run directory (the shared baseline as ../<task>-baseline/...), so the
    # suite's directory can be moved as a whole
    stored = [
        replace(r, artifacts=Path(os.path.relpath(r.artifacts.resolve(), run_dir.resolve()))) for r in records
    ]
    save_run(run_dir, plan_path, plan_path.read_text(), stored)
    result = score(load_plan(plan_path), records)
    result.warnings.extend(warnings)
    report = out_dir / f"{experiment.name}.json"
    write_reports(result, report)
    return ScoredExperiment(experiment, result, report)


def _say(template: RunSettings, text: str) -> None:
    print(f"[mitmchaos {time.strftime('%H:%M:%S')}] {text}", file=template.progress, flush=True)


def worst_exit_code(runs: list[ScoredExperiment]) -> int:
    return max((r.result.exit_code for r in runs), default=0)


# ---------------------------------------------------------------- the comparison


@dataclass
class Cell:
    probe: ProbeOutcome
    below_threshold: bool  # the probe FAILs under this fault set
    below_baseline: bool  # its faulted pass rate is under the shared baseline's

    @property
    def hurt(self) -> bool:
        return self.below_threshold or self.below_baseline


def cell(probe: ProbeOutcome) -> Cell:
    f, b = probe.faulted, probe.baseline
    return Cell(probe, probe.status == "FAIL", bool(f.runs and b.runs and f.rate < b.rate))


@dataclass
class ComparisonRow:
    run: ScoredExperiment
    cells: list[Cell]


@dataclass
class TaskComparison:
    task: str
    probes: list[str]  # labels, the task plan's order
    baseline: list[
        ProbeOutcome
    ]  # for the shared baseline's row (the baseline stats are the same in every row)
    rows: list[ComparisonRow]  # one per fault set


def compare(runs: list[ScoredExperiment]) -> list[TaskComparison]:
    """One table per task: rows fault sets, columns probes."""
    tables: dict[str, TaskComparison] = {}
    for run in runs:
        probes = run.result.probes
        table = tables.setdefault(
            run.experiment.task, TaskComparison(run.experiment.task, [p.label for p in probes], probes, [])
        )
        table.rows.append(ComparisonRow(run, [cell(p) for p in probes]))
    return list(tables.values())


@dataclass
class SuiteResult:
    name: str
    description: str
    runs: list[ScoredExperiment]

    @property
    def exit_code(self) -> int:
        return worst_exit_code(self.runs)


def run_suite(
    suite: Suite, expansions: list[TaskExpansion], template: RunSettings, out_dir: Path
) -> SuiteResult:
    return SuiteResult(suite.name, suite.description, run_expansions(expansions, out_dir, template))
