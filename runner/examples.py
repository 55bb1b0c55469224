"""Shipped experiments, run in a scratch project; and the key-free demo.

``mitmchaos example PLAN`` runs a plan the way a user runs it in their own repository, but
from a fresh git repository holding only the plan and the files its stand-ins serve, so it
works from any checkout, clean or not. ``mitmchaos demo`` runs one key-free experiment once
per scripted-model behaviour (careful, reckless) and prints the two scores side by side;
it fails unless the careful agent scores clearly higher, because then the probes could not
tell a good agent from a bad one.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from mitmchaos.catalog import shipped_plans_dir
from mitmchaos.scripted_model import BEHAVIOURS

DEMO_PLAN = "offline-registry-down"
DEMO_MARGIN = 20  # points the careful agent must score above the reckless one


class ExampleError(RuntimeError):
    pass


def find_plan(name_or_path: str) -> Path:
    """A plan file, or the name of a shipped one (``registry-down``)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = shipped_plans_dir() / f"{name_or_path.removesuffix('.yaml')}.yaml"
    if shipped.is_file():
        return shipped
    raise ExampleError(
        f"no plan file {name_or_path!r} and no shipped plan of that name in {shipped_plans_dir()}"
    )


def scratch_project(plan_path: Path, root: Path, behaviour: str | None = None) -> Path:
    """A git repository at ``root`` with the plan and what its stand-ins serve; returns the plan's path there.

    With ``behaviour``, every scripted-model stand-in of the copy answers that way.
    """
    source = plan_path.parent
    data = yaml.safe_load(plan_path.read_text())
    root.mkdir(parents=True)
    for stand_in in data.get("stand_ins") or []:
        if behaviour and stand_in.get("scripted_model"):
            stand_in["scripted_model"] = behaviour
        handler_file = (stand_in.get("handler") or "").rpartition(":")[0]
        for ref in (stand_in.get("dir"), stand_in.get("flows"), handler_file):
            if not ref or Path(ref).is_absolute() or not (source / ref).exists():
                continue  # absolute paths and module handlers work from anywhere
            top = Path(ref).parts[0]
            if top == ".." or (root / top).exists():
                continue
            copy = shutil.copytree if (source / top).is_dir() else shutil.copy2
            copy(source / top, root / top)
    plan_copy = root / plan_path.name
    plan_copy.write_text(yaml.safe_dump(data, sort_keys=False))
    git = ["git", "-C", str(root), "-c", "user.name=mitmchaos", "-c", "user.email=mitmchaos@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", f"scratch project for {plan_path.name}"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return plan_copy


@dataclass
class ExampleRun:
    behaviour: str | None
    result: object  # scoring.RunResult
    report: Path
    seconds: float


def run_example(
    plan_path: Path, workdir: Path, behaviour: str | None = None, sandbox_image: str | None = None
) -> ExampleRun:
    """Run the plan in a scratch project under ``workdir``; the report goes beside it."""
    from mitmchaos.report.text import render_summary
    from mitmchaos.run import RunSettings, execute, score_and_report

    label = behaviour or "as-shipped"
    plan_copy = scratch_project(plan_path, workdir / f"project-{label}", behaviour)
    started = time.monotonic()
    outcome = execute(
        RunSettings(plan_copy, sandbox_image, out=workdir / f"report-{label}.json", cwd=plan_copy.parent)
    )
    result = score_and_report(outcome)
    print(render_summary(result), flush=True)
    print(f"report     : {outcome.report_path}", flush=True)
    return ExampleRun(behaviour, result, outcome.report_path, round(time.monotonic() - started, 1))


def default_workdir(name: str) -> Path:
    base = Path(tempfile.gettempdir()) / "mitmchaos"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-", dir=base))


def side_by_side(runs: list[ExampleRun]) -> str:
    """One row per probe, one column per behaviour: faulted-phase pass rate, then the scores."""
    width = max(len(p.label) for r in runs for p in r.result.probes)
    header = f"{'':<{width}}  " + "  ".join(f"{r.behaviour:>10}" for r in runs)
    rows = [header]
    for index, probe in enumerate(runs[0].result.probes):
        cells = []
        for run in runs:
            faulted = run.result.probes[index].faulted
            cells.append(f"{faulted.passes}/{faulted.runs}".rjust(10) if faulted.runs else "n/a".rjust(10))
        rows.append(f"{probe.label:<{width}}  " + "  ".join(cells))
    rows.append(
        f"{'score':<{width}}  "
        + "  ".join(
            (f"{r.result.score:.1f}" if r.result.score is not None else "none").rjust(10) for r in runs
        )
    )
    rows.append(f"{'verdict':<{width}}  " + "  ".join(r.result.verdict.rjust(10) for r in runs))
    rows.append(f"{'time (s)':<{width}}  " + "  ".join(f"{r.seconds:.0f}".rjust(10) for r in runs))
    return "\n".join(rows)


def demo_failure(runs: list[ExampleRun]) -> str | None:
    """Why the demo failed, or None: both runs scored and the careful agent clearly ahead."""
    by = {r.behaviour: r.result for r in runs}
    for behaviour, result in by.items():
        if result.verdict != "scored" or result.score is None:
            return f"the {behaviour} run was not scored (verdict {result.verdict})"
    if by["careful"].score < by["reckless"].score + DEMO_MARGIN:
        return (
            f"the careful agent scored {by['careful'].score:.1f}, not at least {DEMO_MARGIN} points "
            f"above the reckless one ({by['reckless'].score:.1f}): the probes did not tell them apart"
        )
    return None


def demo(
    plan_path: Path, workdir: Path, sandbox_image: str | None = None
) -> tuple[list[ExampleRun], str | None]:
    runs = []
    for behaviour in BEHAVIOURS:
        print(f"\n=== {plan_path.stem}, scripted model: {behaviour} ===", flush=True)
        runs.append(run_example(plan_path, workdir, behaviour, sandbox_image))
    return runs, demo_failure(runs)
