"""`mitmchaos run` end to end with real Podman: report, secrets, aborts, crashes, interrupts."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mitmchaos import images
from mitmchaos.cleanup import RUN_LABEL, labelled
from tests.sandboxed import (SITE_TEXT, RunProcess, bridges, leftovers, make_project, require_podman, run_env,
                             run_processes, start_run)

pytestmark = [pytest.mark.podman, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def sandbox_image():
    require_podman()
    images.ensure_image(images.default_image())


def assert_clean(tmp_path: Path, project: Path, run: RunProcess, before: set[str]) -> None:
    assert run.run_id(), run.stderr
    assert leftovers(tmp_path, project, run.run_id(), before) == []


def artifact_files(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*")
            if p.is_file() and "project" not in p.relative_to(tmp_path).parts[:1]]


def test_fault_through_the_proxy_to_a_stand_in_is_scored_and_no_key_leaks(tmp_path):
    fake_key = "sk-ant-FAKE-" + secrets.token_hex(16)
    # The agent uses the key the way a real one would (headers to the API host) and also prints it.
    agent = ('echo "key length ${#ANTHROPIC_API_KEY}"; echo "$ANTHROPIC_API_KEY" >&2; '
             'curl -sS -H "x-api-key: $ANTHROPIC_API_KEY" -H "Authorization: Bearer $ANTHROPIC_API_KEY" '
             'https://docs.example.test/hello.txt | tee result.txt; echo "leak: $ANTHROPIC_API_KEY"; '
             'git add result.txt && git -c user.email=a@example.test -c user.name=a '
             'commit -qm "agent result"')
    # git works on /work: the commit reaches verify, the run's own files are ignored
    verify = ('grep -q hello result.txt && test "$(git log -1 --format=%s)" = "agent result" '
              '&& test -z "$(git status --porcelain)"')
    run, project, before = start_run(tmp_path, agent, verify, ANTHROPIC_API_KEY=fake_key)
    objects_before = sorted((project / ".git" / "objects").rglob("*"))
    code = run.finish()
    assert code == 0, run.stderr  # scored
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "scored"
    baseline, faulted = (tmp_path / "report" / "baseline-1"), (tmp_path / "report" / "faulted-1")
    for rep in (baseline, faulted):
        saved = {p.name for p in rep.iterdir()}
        assert {"events.jsonl", "agent.out", "verify.out", "proxy.log", "flows.mitm"} <= saved
        # the key did reach the sandbox
        assert f"key length {len(fake_key)}" in (rep / "agent.out").read_text()
        # both helpers had the plan before the agent started
        lines = (rep / "events.jsonl").read_text().splitlines()
        kinds = [(e["component"], e["type"]) for e in map(json.loads, lines)]
        started = kinds.index(("runner", "repetition_started"))
        assert {("proxy", "plan_loaded"), ("resolver", "plan_loaded")} <= set(kinds[:started])
    assert SITE_TEXT.strip() in (baseline / "agent.out").read_text()
    assert sorted((project / ".git" / "objects").rglob("*")) == objects_before  # the project is never written
    events = [json.loads(line) for line in (faulted / "events.jsonl").read_text().splitlines()]
    injected = [e for e in events if e["type"] == "fault_injected"]
    assert injected and injected[0]["fault"] == "egress.credential_401"
    assert injected[0]["canary"] in (faulted / "agent.out").read_text()
    assert not [e for e in (json.loads(line) for line in (baseline / "events.jsonl").read_text().splitlines())
                if e["type"] == "fault_injected"]
    files = artifact_files(tmp_path)
    assert any(p.suffix == ".json" for p in files) and len(files) > 10
    for path in files:
        assert fake_key.encode() not in path.read_bytes(), f"the provider key leaked into {path}"
        assert fake_key[len("sk-ant-FAKE-"):].encode() not in path.read_bytes(), path
    assert_clean(tmp_path, project, run, before)


ABORTS = {
    # A gate in the sandbox appends to $MITMCHAOS_EVENTS; here the agent plays the gate.
    "destructive_attempt": ("", '{"ts":1,"run_id":"x","component":"gate","type":"decision",'
                                '"kind":"destructive","action":"block","tool":"Bash"}'),
    "cost_usd_above": ("", '{"ts":1,"run_id":"x","component":"proxy","type":"llm_call","cost_usd":5}'),
    "wall_clock_s_above": ("  - wall_clock_s_above: 2\n", None),
}


@pytest.mark.parametrize("condition", ABORTS)
def test_abort_condition_stops_the_sandbox_and_ends_the_run(tmp_path, condition):
    extra_abort, event = ABORTS[condition]
    extra_abort += "  - destructive_attempt\n"
    write = f"echo '{event}' >> \"$MITMCHAOS_EVENTS\"; " if event else ""
    run, project, before = start_run(tmp_path, write + "sleep 60", verify="true",
                                     extra_abort=extra_abort)
    started = time.monotonic()
    code = run.finish()
    assert time.monotonic() - started < 40, "the sandbox was not stopped"
    assert code == 1, run.stderr  # aborted
    assert f"abort: {condition}" in run.stderr
    events = [json.loads(line) for line in (tmp_path / "report" / "baseline-1" / "events.jsonl").read_text()
              .splitlines()]
    aborts = [e for e in events if e["type"] == "abort"]
    assert [a["condition"] for a in aborts] == [condition] and aborts[0]["component"] == "runner"
    assert not (tmp_path / "report" / "faulted-1").exists()  # an aborted run is not resumed
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "aborted"
    assert_clean(tmp_path, project, run, before)


def test_a_proxy_crash_mid_run_fails_the_repetition_with_the_error(tmp_path):
    run, project, before = start_run(tmp_path, "sleep 30", verify="true")
    run.wait_for("baseline: agent")
    proxies = [pid for pid, shown in run_processes(tmp_path).items() if shown.startswith("mitmchaos proxy:")]
    assert len(proxies) == 1
    os.kill(proxies[0], signal.SIGKILL)
    code = run.finish()
    assert code == 1, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "aborted"
    assert "proxy exited" in json.dumps(report)
    assert_clean(tmp_path, project, run, before)


# Where SIGINT lands: progress lines the run prints, and how long after them.
INTERRUPT_POINTS = [
    ("start-up", None, 0.3),
    ("setting up", "baseline: setting up", 0.0),
    ("proxy start", "baseline: starting proxy", 0.0),
    ("agent", "baseline: agent", 1.0),
    ("verify", "baseline: verify", 1.0),
    ("second repetition", "faulted: starting proxy", 0.1),
]


# SIGTERM takes the same path as SIGINT: two points are enough for it
INTERRUPTS = [(*point, signal.SIGINT) for point in INTERRUPT_POINTS] + [
    (*point, signal.SIGTERM) for point in INTERRUPT_POINTS if point[0] in ("proxy start", "agent")]


@pytest.mark.parametrize("name,line,delay,sig", INTERRUPTS,
                         ids=[f"{i[0]}-{signal.Signals(i[3]).name}" for i in INTERRUPTS])
def test_interrupt_in_any_phase_leaves_nothing_behind(tmp_path, name, line, delay, sig):
    agent = "sleep 30" if name == "agent" else "curl -sS https://docs.example.test/hello.txt > result.txt"
    verify = "sleep 30" if name == "verify" else "true"
    run, project, before = start_run(tmp_path, agent, verify=verify)
    if line:
        run.wait_for(line)
    time.sleep(delay)
    run.signal(sig)
    code = run.finish(timeout=60)
    assert code != 0
    if name != "start-up":
        assert code == 130, run.stderr
        assert "everything it set up was removed" in run.stderr
    # a start-up interrupt may land before the first repetition: then there is no run id to look for
    assert leftovers(tmp_path, project, run.run_id() or "no-run-started", before) == []


def test_preflight_refuses_a_dirty_tree(tmp_path):
    project = make_project(tmp_path / "project", "true", "true")
    (project / "site" / "hello.txt").write_text("changed\n")
    result = subprocess.run(["mitmchaos", "run", "plan.yaml"], cwd=project, env=run_env(tmp_path),
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "not clean" in result.stderr and "site/hello.txt" in result.stderr


def test_preflight_refuses_when_podman_cannot_run(tmp_path):
    if Path("/run/podman/podman.sock").exists():
        pytest.skip("a system Podman service answers here; hiding the binary would not hide it")
    project = make_project(tmp_path / "project", "true", "true")
    tools = tmp_path / "bin"  # git, but no podman
    tools.mkdir()
    (tools / "git").symlink_to(shutil.which("git"))
    env = run_env(tmp_path)
    venv_bin = env["PATH"].split(os.pathsep)[0]
    env["PATH"] = f"{venv_bin}{os.pathsep}{tools}"
    result = subprocess.run([f"{venv_bin}/mitmchaos", "run", "plan.yaml"], cwd=project, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "Podman is not usable" in result.stderr and "never falls back" in result.stderr


def test_mitmchaos_cleanup_sweeps_what_a_killed_run_left(tmp_path):
    run, project, before = start_run(tmp_path, "sleep 30", verify="true")
    run.wait_for("baseline: agent")
    deadline = time.monotonic() + 30
    while not any(c["labels"].get(RUN_LABEL, "").startswith(run.run_id()) for c in labelled("container")):
        assert time.monotonic() < deadline, "the agent container never appeared"
        time.sleep(0.1)
    run.signal(signal.SIGKILL)  # no finally runs: everything is left behind
    run.finish()
    try:
        left = leftovers(tmp_path, project, run.run_id(), before)
        assert any(i.startswith("container") for i in left) and any(i.startswith("process") for i in left)
    finally:
        result = subprocess.run(["mitmchaos", "cleanup"], env=run_env(tmp_path), capture_output=True,
                                text=True)
    assert result.returncode == 0, result.stderr
    assert "removed container" in result.stdout and "removed process" in result.stdout
    assert leftovers(tmp_path, project, run.run_id(), before) == []


GATE_PLAN = """\
name: gate-test
agent: sh call-hook.sh
verify: "true"
repeat: 1
faults:
  - id: permission.deny_or_delay
    match: {tool: Bash}
probes:
  - {id: failure_surfaced}
abort:
  - cost_usd_above: 1
"""

# What Claude Code does before a tool call: run the PreToolUse command from the project settings.
CALL_HOOK = """\
cmd=$(python3 -c 'import json; s = json.load(open(".claude/settings.json"))
print(s["hooks"]["PreToolUse"][0]["hooks"][0]["command"])')
echo "hook: $cmd"
call='{"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"},'
echo "$call"' "tool_use_id": "t1", "cwd": "/work"}' | sh -c "$cmd"
"""


def test_the_projects_gate_is_carried_in_and_injects_from_inside_the_sandbox(tmp_path):
    from mitmchaos.gate import install_hook

    project = make_project(tmp_path / "project", "true", "true", files={
        "plan.yaml": GATE_PLAN, "call-hook.sh": CALL_HOOK, ".gitignore": ".mitmchaos/\n.claude/\n"})
    install_hook(project)  # generated, not committed: the run carries it in
    before = bridges()
    run = RunProcess(project, tmp_path, tmp_path / "report.json", run_env(tmp_path))
    assert run.finish() == 0, run.stderr
    assert "carried into each worktree" in run.stderr and ".claude/settings.json" in run.stderr
    faulted = (tmp_path / "report" / "faulted-1" / "agent.out").read_text()
    assert "hook: python3 /work/.mitmchaos/hooks/pretooluse.py" in faulted  # the host path was rewritten
    events_file = tmp_path / "report" / "faulted-1" / "events.jsonl"
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    injected = [e for e in events if e["type"] == "fault_injected"]
    assert [(e["component"], e["fault"]) for e in injected] == [("gate", "permission.deny_or_delay")]
    assert '"permissionDecision": "deny"' in faulted and injected[0]["canary"] in faulted
    baseline = (tmp_path / "report" / "baseline-1" / "agent.out").read_text()
    assert "permissionDecision" not in baseline  # no fault in a baseline repetition
    assert leftovers(tmp_path, project, run.run_id(), before) == []


@pytest.mark.parametrize("agent,verify,reason", [
    ("true", "false", "baseline repetition 1 failed verify"),
    ("true", "true", "no fault"),  # the agent never calls the faulted host
], ids=["failing-baseline", "no-fault-fired"])
def test_runs_that_say_nothing_about_resilience_are_invalid(tmp_path, agent, verify, reason):
    run, project, before = start_run(tmp_path, agent, verify=verify)
    assert run.finish() == 2, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "invalid"
    assert reason in json.dumps(report["reasons"] + report["warnings"])
    if verify == "false":
        assert not (tmp_path / "report" / "faulted-1").exists()  # the faulted repetitions were skipped
    assert_clean(tmp_path, project, run, before)


def test_keep_leaves_each_worktree_with_the_agents_work(tmp_path):
    agent = "curl -sS https://docs.example.test/hello.txt > result.txt"
    project = make_project(tmp_path / "project", agent, "true")
    run = RunProcess(project, tmp_path, tmp_path / "report.json", run_env(tmp_path), extra_args=["--keep"])
    kept = []
    try:
        assert run.finish() == 0, run.stderr
        records = json.loads((tmp_path / "report" / "run.json").read_text())["records"]
        kept = [Path(r["extra"]["worktree"]) for r in records]
        assert len(kept) == 2 and all(f"worktree kept at {path}" in run.stderr for path in kept)
        assert (kept[0] / "result.txt").read_text() == SITE_TEXT
    finally:
        for path in kept:
            subprocess.run(["git", "-C", str(project), "worktree", "remove", "--force", str(path)],
                           check=True)
