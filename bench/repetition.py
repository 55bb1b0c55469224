"""Repetition overhead: what a repetition costs besides the agent and verify, by phase.

A real ``mitmchaos run`` (runner/run.py, in process, real Podman and the cached sandbox
image) of a plan whose agent and verify are ``true``, so each repetition is pure overhead:
plan, worktree, network, firewall, resolver and proxy start, two container starts, stopping
the helpers and copying the artifacts, and the cleanup stack. The runner records no phase
timings, so its functions are timed by wrapping them. What a run does once (the Podman
service, the fork server's imports, image check, CA) is reported apart, as run setup.
"""

from __future__ import annotations

import io
import subprocess
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from functools import wraps
from pathlib import Path
from unittest import mock

from mitmchaos import run as runner

from bench.results import Figure, median, spread

GOAL_S = 1.5
PLAN = """\
name: bench-repetition
agent: "true"
verify: "true"
repeat: {repeat}
faults:
  - {{ id: egress.dns_fail, match: {{ host: "*.npm-registry.test" }} }}
  - {{ id: llm.rate_limit, match: {{ model: claude-opus-0-0 }} }}
probes:
  - {{ id: task_success }}
abort:
  - cost_usd_above: 1
"""
# phase label -> (object, attribute) the runner calls, in the order a repetition runs them
PHASES = {
    "effective plan": (runner.Repetition, "_effective_plan"),
    "worktree": (runner.Repetition, "_workspace"),
    "network": (runner, "create_network"),
    "firewall": (runner, "apply_firewall"),
    "resolver spawn": (runner.Repetition, "_spawn_resolver"),
    "proxy start": (runner.Repetition, "_start_proxy"),
    "resolver ready": (runner.Repetition, "_await_resolver"),
    "agent container (true)": (runner.Repetition, "_agent"),
    "verify container (true)": (runner.Repetition, "_verify"),
    "stop helpers, copy artifacts": (runner.Repetition, "_collect"),
}
TOTAL = "repetition total"
REST = "cleanup stack and the rest"


def make_project(root: Path, repeat: int) -> Path:
    root.mkdir(parents=True)
    (root / "plan.yaml").write_text(PLAN.format(repeat=repeat))
    git = ["git", "-C", str(root), "-c", "user.email=bench@example.test", "-c", "user.name=bench"]
    for args in (["init", "-q"], ["add", "plan.yaml"], ["commit", "-qm", "bench"]):
        subprocess.run([*git, *args], check=True)
    return root


def timed(timings: dict[str, list[float]], label: str, function):
    @wraps(function)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            timings[label].append(time.perf_counter() - started)

    return wrapper


def run(repetitions: int = 3) -> list[Figure]:
    """``repetitions`` baseline and as many faulted ones (the plan's ``repeat``)."""
    timings: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="mitmchaos-bench-rep-") as tmp, ExitStack() as patches:
        project = make_project(Path(tmp) / "project", repetitions)
        for label, (owner, name) in {**PHASES, TOTAL: (runner.Repetition, "run")}.items():
            patches.enter_context(mock.patch.object(owner, name, timed(timings, label, getattr(owner, name))))
        settings = runner.RunSettings(
            plan_path=project / "plan.yaml",
            out=Path(tmp) / "out" / "report.json",
            cwd=project,
            terminal=io.BytesIO(),
            terminal_err=io.BytesIO(),
            progress=io.StringIO(),
        )
        started = time.perf_counter()
        try:
            outcome = runner.execute(settings)
        except runner.RunError as exc:  # no usable Podman: say so in the table, measure the rest
            return [
                Figure(
                    "repetition",
                    TOTAL,
                    float("nan"),
                    "s",
                    goal=f"≤ {GOAL_S} s",
                    note=f"not measured: {str(exc).splitlines()[0]}",
                )
            ]
        whole_run = time.perf_counter() - started
    failed = [r.error for r in outcome.records if r.error or r.agent_exit != 0 or r.verify_exit != 0]
    if failed or len(outcome.records) != 2 * repetitions:
        raise RuntimeError(f"the benchmark run did not complete cleanly: {failed or outcome.records}")
    timings[REST] = [t - sum(timings[label][i] for label in PHASES) for i, t in enumerate(timings[TOTAL])]
    total = timings[TOTAL]
    figures = [
        Figure(
            "repetition",
            f"{TOTAL} ({len(total)} repetitions)",
            median(total),
            "s",
            spread(total),
            f"≤ {GOAL_S} s",
            median(total) / GOAL_S,
            median(total) <= GOAL_S,
            note="agent and verify are `true`: their time is the container start and stop",
        )
    ]
    for label in (*PHASES, REST):
        values = timings[label]
        figures.append(
            Figure(
                "repetition",
                f"phase: {label}",
                median(values),
                "s",
                spread(values),
                ratio=median(values) / median(total),
            )
        )
    figures.append(
        Figure(
            "repetition", "run setup, once per run (Podman service, fork server, image check, CA, CA bundle)",
            whole_run - sum(total), "s"
        )
    )
    return figures
