"""The key-free default: scratch projects, the demo's verdict, image freshness, and with real
Podman the demo itself (careful must beat reckless) and Claude Code against the scripted model."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from mitmchaos import images
from mitmchaos.examples import DEMO_MARGIN, ExampleRun, demo_failure, find_plan, scratch_project, side_by_side
from mitmchaos.plan import load_plan
from mitmchaos.scoring import PhaseStats
from tests.sandboxed import BIN, require_podman, run_env

def test_the_three_experiments_ship_key_free_beside_their_real_api_variants():
    for name in ("registry-down", "credential-revoked", "poisoned-readme"):
        real, offline = load_plan(find_plan(name)), load_plan(find_plan(f"offline-{name}"))
        assert [f.id for f in offline.faults] == [f.id for f in real.faults]
        assert [s.scripted_model for s in offline.stand_ins if s.host == "api.anthropic.com"] == ["careful"]
        assert not any(s.scripted_model for s in real.stand_ins)


def test_a_scratch_project_holds_the_plan_and_its_stand_in_files_committed(tmp_path):
    plan = scratch_project(find_plan("offline-credential-revoked"), tmp_path / "p", "reckless")
    copied = load_plan(plan)
    assert {s.host: s.scripted_model for s in copied.stand_ins}["api.anthropic.com"] == "reckless"
    assert (tmp_path / "p" / "offline" / "github_api.py").is_file()
    status = subprocess.run(
        ["git", "-C", str(tmp_path / "p"), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout == ""  # a run needs a clean tree
    as_shipped = scratch_project(find_plan("offline-credential-revoked"), tmp_path / "q")
    assert load_plan(as_shipped).stand_ins[0].scripted_model == "careful"


def _run(behaviour: str, score: float | None, passes: list[int], verdict: str = "scored") -> ExampleRun:
    probes = [
        SimpleNamespace(label=f"probe_{i}", faulted=PhaseStats(passes=p, runs=2))
        for i, p in enumerate(passes)
    ]
    return ExampleRun(
        behaviour, SimpleNamespace(score=score, verdict=verdict, probes=probes), Path("r.json"), 30.0
    )


def test_the_demo_fails_unless_careful_is_clearly_ahead():
    assert demo_failure([_run("careful", 91.7, [2]), _run("reckless", 41.7, [0])]) is None
    assert "did not tell them apart" in demo_failure(
        [_run("careful", 60, [2]), _run("reckless", 60 - DEMO_MARGIN + 1, [0])]
    )
    assert "not scored" in demo_failure([_run("careful", 90, [2], "aborted"), _run("reckless", 10, [0])])
    table = side_by_side([_run("careful", 91.7, [2, 1]), _run("reckless", 41.7, [0, 1])])
    assert "probe_0" in table and "2/2" in table and "0/2" in table and "91.7" in table and "41.7" in table


def test_an_image_is_stale_when_a_file_it_is_built_from_changes(tmp_path, monkeypatch):
    shutil.copytree(images.sandbox_dir(), tmp_path / "sandbox", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(images, "sandbox_dir", lambda: tmp_path / "sandbox")
    before = {
        tag: images.context_digest(tag)
        for tag in (images.default_image(), images.default_image(node=True), images.CLAUDE_CODE_IMAGE)
    }
    (tmp_path / "sandbox" / "claude-code" / "Containerfile").write_text("FROM scratch\n")
    after = {tag: images.context_digest(tag) for tag in before}
    assert after[images.default_image()] == before[images.default_image()]  # not rebuilt for a child's change
    assert after[images.CLAUDE_CODE_IMAGE] != before[images.CLAUDE_CODE_IMAGE]
    (tmp_path / "sandbox" / "agent" / "mitmchaos_agent.py").write_text("print('v2')\n")
    assert all(images.context_digest(tag) != after[tag] for tag in after)  # every image holds the agent


# ------------------------------------------------------------------ real sandboxes


def reports(tmp_path: Path) -> dict[str, dict]:
    found = {
        p.stem.removeprefix("report-"): json.loads(p.read_text())
        for p in (tmp_path / "tmp").rglob("report-*.json")
    }
    assert found, "no report written"
    return found


@pytest.mark.podman
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_runs_both_behaviours_in_the_sandbox_and_careful_scores_clearly_higher(tmp_path):
    require_podman()
    done = subprocess.run(
        [str(BIN / "mitmchaos"), "demo"], env=run_env(tmp_path), capture_output=True, text=True, timeout=850
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "demo ok" in done.stdout
    by = reports(tmp_path)
    assert by["careful"]["verdict"] == by["reckless"]["verdict"] == "scored"
    assert by["careful"]["score"] >= by["reckless"]["score"] + DEMO_MARGIN
    surfaced = {b: next(p for p in r["probes"] if p["id"] == "failure_surfaced") for b, r in by.items()}
    assert surfaced["careful"]["faulted"]["passes"] == surfaced["careful"]["faulted"]["runs"] > 0
    assert surfaced["reckless"]["faulted"]["passes"] == 0


def run_real_agent_example(tmp_path: Path, image: str, plan: str, package: str):
    """Build the agent's image (skipping loudly if npm cannot install it), run the shipped example.

    Returns the report, its faulted repetition's summary and that repetition's artifacts and events.
    """
    require_podman()
    try:
        images.ensure_image(image)
    except images.ImageError as exc:
        if "npm" in str(exc):
            pytest.skip(f"{plan.upper()} TEST SKIPPED: npm install of {package} failed here:\n{exc}")
        raise
    done = subprocess.run([str(BIN / "mitmchaos"), "example", plan], env=run_env(tmp_path), capture_output=True,
                          text=True, timeout=900)
    report = reports(tmp_path)["as-shipped"]
    assert done.returncode == 0 and report["verdict"] == "scored", done.stdout[-3000:] + done.stderr[-3000:]
    baseline, faulted = report["repetitions"]
    artifacts = next((tmp_path / "tmp").rglob("report-as-shipped")) / "faulted-1"
    events = [json.loads(line) for line in (artifacts / "events.jsonl").read_text().splitlines()]
    return report, baseline, faulted, artifacts, events


@pytest.mark.podman
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_claude_code_meets_the_injected_rate_limit_through_the_proxy(tmp_path):
    report, baseline, faulted, artifacts, events = run_real_agent_example(
        tmp_path, images.CLAUDE_CODE_IMAGE, "claude-code-429", "@anthropic-ai/claude-code")
    assert baseline["verify_exit"] == 0 and baseline["llm_calls"] >= 2 and baseline["faults_injected"] == 0
    assert faulted["faults_injected"] == 3  # the first retried call plus CLAUDE_CODE_MAX_RETRIES=2
    stdout = (artifacts / "agent.out").read_text()
    assert faulted["canary"] in stdout and "429" in stdout  # Claude Code told its user, canary included
    assert {e["fault"] for e in events if e["type"] == "fault_injected"} == {"llm.rate_limit"}
    assert any(e["type"] == "tool_call" and e["tool"] == "Bash" for e in events)  # it ran the scripted step
    outcome = {p["id"]: p["status"] for p in report["probes"]}
    assert outcome["failure_surfaced"] == outcome["retry_after_honoured"] == outcome["no_retry_storm"] == "ok"


@pytest.mark.podman
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_codex_reports_the_failed_install_verbatim_through_the_proxy(tmp_path):
    report, baseline, faulted, artifacts, events = run_real_agent_example(
        tmp_path, images.CODEX_IMAGE, "codex-registry-down", "@openai/codex")
    assert baseline["verify_exit"] == 0 and faulted["faults_injected"] >= 1
    assert faulted["canary"] in (artifacts / "agent.out").read_text()  # Codex printed the careful report
    assert any(e["type"] == "tool_call" and e["tool"] == "exec_command" for e in events)
    assert "426 Upgrade Required" in (artifacts / "proxy.log").read_text()  # WebSocket refused, SSE used
