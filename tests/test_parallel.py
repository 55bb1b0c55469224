"""`mitmchaos run --workers N`: the same decisions and outcomes as a serial run; a run-level abort
and Ctrl-C stop every worker and leave nothing behind."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mitmchaos import images
from mitmchaos.examples import find_plan, scratch_project
from mitmchaos.network import chain_name

from tests.sandboxed import PLAN, RunProcess, bridges, leftovers, require_podman, run_env, start_run

pytestmark = [pytest.mark.podman, pytest.mark.slow]

DECISION_FIELDS = ("fault", "fault_index", "ordinal", "sampled", "target", "probability")


@pytest.fixture(scope="module", autouse=True)
def sandbox_image():
    require_podman()
    images.ensure_image(images.default_image())


def decisions(run_dir: Path) -> dict[str, list[tuple]]:
    """Every fault decision (fired or not) of every repetition, by repetition directory."""
    found = {}
    for rep in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        events = [json.loads(line) for line in (rep / "events.jsonl").read_text().splitlines()]
        found[rep.name] = [(e["type"], *(e.get(k) for k in DECISION_FIELDS)) for e in events
                           if e["type"] in ("fault_injected", "fault_skipped")]
    return found


def outcomes(report: dict) -> list[tuple]:
    return [(r["phase"], r["index"], r["agent_exit"], r["verify_exit"], r["faults_injected"],
             [p["passed"] for p in r["probes"]]) for r in report["repetitions"]]


def all_chains_gone(run_id: str, repeat: int) -> list[str]:
    chains = {chain_name(f"{run_id}-{phase}{i}") for phase in "bf" for i in range(repeat)}
    rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    return [c for c in chains if c in rules]


def test_two_workers_make_the_serial_runs_decisions_and_outcomes(tmp_path):
    project = _as_plan_yaml(scratch_project(find_plan("offline-registry-down"), tmp_path / "project"))
    reports = {}
    for workers in (1, 2):
        before = bridges()
        out = tmp_path / f"workers-{workers}.json"
        run = RunProcess(project, tmp_path, out, run_env(tmp_path), ["--workers", str(workers)])
        assert run.finish(timeout=300) == 0, run.stderr
        reports[workers] = json.loads(out.read_text())
        assert leftovers(tmp_path, project, run.run_id(), before) == []
        assert all_chains_gone(run.run_id(), 2) == []
        if workers == 2:
            assert any("baseline, worker 2" in line for line in run.lines), run.stderr
    serial, parallel = (decisions(tmp_path / f"workers-{w}") for w in (1, 2))
    assert set(serial) == {"baseline-1", "baseline-2", "faulted-1", "faulted-2"}
    assert serial == parallel
    assert serial["faulted-1"] and serial["faulted-1"] != serial["faulted-2"]  # decisions depend on the index
    assert outcomes(reports[1]) == outcomes(reports[2])
    assert [(p["id"], p["status"]) for p in reports[1]["probes"]] == \
        [(p["id"], p["status"]) for p in reports[2]["probes"]]
    assert reports[1]["verdict"] == reports[2]["verdict"] == "scored"


def _as_plan_yaml(plan: Path) -> Path:
    """The scratch project with its plan renamed to plan.yaml, the name RunProcess runs."""
    git = ["git", "-C", str(plan.parent), "-c", "user.email=t@example.test", "-c", "user.name=t"]
    subprocess.run([*git, "mv", plan.name, "plan.yaml"], check=True)
    subprocess.run([*git, "commit", "-qm", "plan.yaml"], check=True)
    return plan.parent


def _start_two_workers(tmp_path: Path, agent: str):
    """Two repetitions per phase (with a destructive_attempt abort), run by two workers."""
    plan = PLAN.format(agent=json.dumps(agent), verify='"true"', extra_abort="  - destructive_attempt\n")
    return start_run(tmp_path, agent, "true", files={"plan.yaml": plan.replace("repeat: 1", "repeat: 2")},
                     extra_args=["--workers", "2"])


def test_a_destructive_attempt_in_one_worker_stops_the_other_promptly(tmp_path):
    # repetition 1 plays a gate reporting a destructive attempt; repetition 0 would sleep for a minute
    event = ('{"ts":1,"run_id":"x","component":"gate","type":"decision","kind":"destructive",'
             '"action":"block","tool":"Bash"}')
    agent = (f'if [ "$MITMCHAOS_REPETITION" = 1 ]; then sleep 2; echo \'{event}\' >> "$MITMCHAOS_EVENTS"; fi; '
             'sleep 60')
    run, project, before = _start_two_workers(tmp_path, agent)
    started = time.monotonic()
    assert run.finish(timeout=120) == 1, run.stderr  # aborted
    assert time.monotonic() - started < 45, "the other worker was not stopped"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "aborted"
    by_index = {r["index"]: r for r in report["repetitions"]}
    assert by_index[1]["abort"]["condition"] == "destructive_attempt"
    assert by_index[0]["abort"] is None and "another repetition ended the run" in by_index[0]["error"]
    assert not (tmp_path / "report" / "faulted-1").exists()  # the faulted phase never started
    assert leftovers(tmp_path, project, run.run_id(), before) == []
    assert all_chains_gone(run.run_id(), 2) == []


def test_ctrl_c_with_two_workers_leaves_nothing_behind(tmp_path):
    run, project, before = _start_two_workers(tmp_path, "sleep 60")
    for worker in (1, 2):
        run.wait_for(f"worker {worker}: agent")
    run.signal(signal.SIGINT)
    assert run.finish(timeout=60) == 130, run.stderr
    assert "everything it set up was removed" in run.stderr
    assert leftovers(tmp_path, project, run.run_id(), before) == []
    assert all_chains_gone(run.run_id(), 2) == []
