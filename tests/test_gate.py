"""The permission gate, run the way Claude Code runs a PreToolUse hook: JSON on stdin, exit code and JSON out."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mitmchaos.addons.faults import REGISTRY
from mitmchaos.events import EventWriter, read_events
from mitmchaos.gate import SAFETY, Gate, gate_plan_json, install_hook, load_gate_plan
from mitmchaos.plan import parse_plan_text

from tests.conftest import ROOT

HOOK = ROOT / "sandbox" / "gate" / "pretooluse.py"
CANARY = "E-CHAOS-5a5a5a5a"


def plan_text(**fault) -> str:
    return yaml.safe_dump(
        {
            "name": "gate-test",
            "agent": "true",
            "verify": "true",
            "faults": [{"id": "permission.deny_or_delay", **fault}],
            "probes": [{"id": "failure_surfaced"}],
            "abort": [{"cost_usd_above": 1}],
        }
    )


class Hook:
    """Runs the hook script as Claude Code does, against one plan and one events file."""

    def __init__(self, tmp_path, plan: str | None, **env):
        self.events = tmp_path / "events.jsonl"
        self.env = {
            "MITMCHAOS_EVENTS": str(self.events),
            "MITMCHAOS_RUN_ID": "rep-1",
            "MITMCHAOS_CANARY": CANARY,
            "PATH": "/usr/bin:/bin",
            **env,
        }
        if plan is not None:
            (tmp_path / "plan.yaml").write_text(plan)
            self.env["MITMCHAOS_PLAN"] = str(tmp_path / "plan.yaml")

    def __call__(self, tool: str, tool_input: dict, call_id: str = "toolu_1", stdin: str | None = None):
        payload = {
            "session_id": "s1",
            "transcript_path": "/tmp/t.jsonl",
            "cwd": "/work",
            "hook_event_name": "PreToolUse",
            "tool_name": tool,
            "tool_input": tool_input,
            "tool_use_id": call_id,
        }
        proc = subprocess.run(
            [sys.executable, str(HOOK)],
            input=stdin or json.dumps(payload),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        decision = json.loads(proc.stdout)["hookSpecificOutput"] if proc.stdout.strip() else None
        return proc.returncode, decision, proc.stderr

    def log(self, type: str):
        return read_events(self.events).of_type(type)


def test_deny_refuses_once_with_the_canary(tmp_path):
    hook = Hook(tmp_path, plan_text(mode="deny", match={"tool": "Edit"}, times=1))
    edit = {"file_path": "/work/a.py", "old_string": "a", "new_string": "b"}
    assert hook("Bash", {"command": "ls"})[:2] == (0, None)  # not a matching tool: no opinion
    code, decision, _ = hook("Edit", edit, "toolu_2")
    assert (
        code == 0 and decision["hookEventName"] == "PreToolUse" and decision["permissionDecision"] == "deny"
    )
    assert (
        decision["permissionDecisionReason"].startswith("[mitmchaos] DENIED:")
        and CANARY in decision["permissionDecisionReason"]
    )
    assert hook("Edit", edit, "toolu_3")[:2] == (0, None)  # times: 1
    (loaded,) = hook.log("plan_loaded")
    assert loaded["component"] == "gate" and loaded["injects"] == ["permission.deny_or_delay"]
    (fault,) = hook.log("fault_injected")
    assert fault["canary"] == CANARY and fault["mode"] == "deny" and fault["tool_call_id"] == "toolu_2"
    assert [(e["tool"], e["call_id"]) for e in hook.log("tool_call")] == [
        ("Bash", "toolu_1"),
        ("Edit", "toolu_2"),
        ("Edit", "toolu_3"),
    ]
    (failed,) = hook.log("tool_result")
    assert failed["ok"] is False and failed["call_id"] == "toolu_2" and CANARY in failed["error"]
    (decided,) = hook.log("decision")
    assert (decided["kind"], decided["action"], decided["tool"]) == ("permission", "deny", "Edit")


def test_delay_holds_identical_retries_until_delay_passed_then_lets_through(tmp_path):
    hook = Hook(tmp_path, plan_text(mode="delay", delay_s=1.5, match={"tool": "Bash"}))
    npm = {"command": "npm install"}
    code, decision, _ = hook("Bash", npm, "t1")
    assert code == 0 and decision["permissionDecisionReason"].startswith("[mitmchaos] HELD:")
    assert CANARY in decision["permissionDecisionReason"]
    assert hook("Bash", npm, "t2")[1]["permissionDecision"] == "deny"  # identical retry: still held
    # a different call is a new matching call, held on its own; it does not release the first
    assert hook("Bash", {"command": "npm test"}, "t3")[1]["permissionDecisionReason"].startswith(
        "[mitmchaos] HELD:"
    )
    time.sleep(1.6)
    assert hook("Bash", npm, "t4")[:2] == (0, None)  # first retry after delay_s: let through
    assert "HELD" in hook("Bash", npm, "t5")[1]["permissionDecisionReason"]  # hold over: a new matching call
    faults = hook.log("fault_injected")
    assert [f["tool_call_id"] for f in faults] == ["t1", "t3", "t5"]  # one hold, one injection
    assert all(f["mode"] == "delay" and f["delay_s"] == 1.5 for f in faults)
    actions = [(e["action"], e["call_id"]) for e in hook.log("decision")]
    assert actions == [("hold", "t1"), ("hold", "t2"), ("hold", "t3"), ("allow", "t4"), ("hold", "t5")]
    assert [e["call_id"] for e in hook.log("tool_result") if not e["ok"]] == ["t1", "t2", "t3", "t5"]


def test_hold_then_deny_with_zero_delay_decides_on_the_immediate_retry(tmp_path):
    hook = Hook(tmp_path, plan_text(mode="hold_then_deny", delay_s=0, match={"tool": "Write"}, times=1))
    write = {"file_path": "/work/out.txt", "content": "hi"}
    assert "HELD" in hook("Write", write, "w1")[1]["permissionDecisionReason"]
    reason = hook("Write", write, "w2")[1]["permissionDecisionReason"]
    assert reason.startswith("[mitmchaos] DENIED:") and CANARY in reason
    assert hook("Write", write, "w3")[:2] == (0, None)
    assert len(hook.log("fault_injected")) == 1


def test_destructive_call_is_blocked_and_recorded(tmp_path):
    hook = Hook(tmp_path, plan=None)
    code, decision, _ = hook("Bash", {"command": "cd /work && rm -rf ~/"})
    assert code == 0 and decision["permissionDecision"] == "deny"
    assert "destructive" in decision["permissionDecisionReason"]
    (decided,) = hook.log("decision")
    assert decided == {
        **decided,
        "kind": "destructive",
        "action": "block",
        "tier": "destructive",
        "rule": "delete_outside_workspace",
        "tool": "Bash",
        "component": "gate",
    }
    assert hook("Bash", {"command": "rm -rf ./build"})[:2] == (0, None)
    assert not hook.log("plan_loaded")  # no plan: nothing to inject, nothing announced


def test_interlock_off_only_observes(tmp_path):
    hook = Hook(tmp_path, plan=None, MITMCHAOS_INTERLOCK="0")
    assert hook("Bash", {"command": "git push --force"})[:2] == (0, None)
    (decided,) = hook.log("decision")
    assert (decided["action"], decided["rule"]) == ("observe", "git_force_push")


def test_a_broken_gate_blocks_with_exit_2(tmp_path):
    hook = Hook(tmp_path, plan_text(mode="deny"))
    code, decision, stderr = hook("Bash", {}, stdin="not json")
    assert code == 2 and decision is None and "[mitmchaos] gate error" in stderr


def test_library_hold_timing_with_a_clock(tmp_path):
    now = [1000.0]
    plan = parse_plan_text(plan_text(mode="hold_then_deny", delay_s=30))
    gate = Gate(plan, EventWriter(tmp_path / "ev.jsonl", "r", "gate"), CANARY, clock=lambda: now[0])
    first = gate.check("mcp__fs__delete", {"path": "x"})
    assert (first.allowed, first.code) == (False, "HELD")
    now[0] += 29.9
    assert gate.check("mcp__fs__delete", {"path": "x"}).code == "HELD"
    now[0] += 0.1
    last = gate.check("mcp__fs__delete", {"path": "x"})
    assert (last.allowed, last.code) == (False, "CHAOS_FAULT") and CANARY in last.message
    (call, *_) = read_events(tmp_path / "ev.jsonl").of_type("tool_call")
    assert (call["tool_key"], call["source"]) == ("delete", "gate")


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a system python3")
def test_installed_hook_runs_on_a_bare_python3_with_the_json_plan(tmp_path):
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.json").write_text('{"permissions": {"allow": ["Bash(npm *)"]}}')
    written = install_hook(project)
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["permissions"] == {"allow": ["Bash(npm *)"]}  # the project's own settings stay
    (entry,) = settings["hooks"]["PreToolUse"]
    assert entry["hooks"][0]["command"] == f"python3 {project}/.mitmchaos/hooks/pretooluse.py"
    assert install_hook(project) == written  # installing twice adds no second entry
    assert len(json.loads((project / ".claude" / "settings.json").read_text())["hooks"]["PreToolUse"]) == 1

    plan_json = tmp_path / "plan.json"
    plan_json.write_text(gate_plan_json(parse_plan_text(plan_text(mode="deny", match={"tool": "Edit"}))))
    events = tmp_path / "events.jsonl"
    payload = json.dumps(
        {
            "tool_name": "Edit",
            "tool_input": {"file_path": "/work/a"},
            "tool_use_id": "e1",
            "cwd": "/work",
            "hook_event_name": "PreToolUse",
        }
    )
    bare = "/usr/bin/python3"  # the sandbox's interpreter: no pydantic, no PyYAML, no mitmchaos
    proc = subprocess.run(
        [bare, str(project / ".mitmchaos/hooks/pretooluse.py")],
        input=payload,
        text=True,
        capture_output=True,
        timeout=30,
        check=False,
        cwd=tmp_path,
        env={
            "MITMCHAOS_PLAN": str(plan_json),
            "MITMCHAOS_EVENTS": str(events),
            "MITMCHAOS_CANARY": CANARY,
            "PATH": "/usr/bin:/bin",
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert CANARY in json.loads(proc.stdout)["hookSpecificOutput"]["permissionDecisionReason"]
    (fault,) = read_events(events).of_type("fault_injected")
    assert (fault["fault"], fault["safety"], fault["component"]) == (
        "permission.deny_or_delay",
        "fail-safe",
        "gate",
    )


def test_json_plan_makes_the_same_decisions_as_the_yaml_plan(tmp_path):
    plan = parse_plan_text(plan_text(mode="deny", probability=0.5) + "seed: 99\n")
    gates = [
        Gate(p, EventWriter(None, "r", "gate"), CANARY)
        for p in (plan, load_gate_plan(_write(tmp_path / "p.json", gate_plan_json(plan))))
    ]
    runs = [[g.check("Bash", {"command": f"echo {i}"}).allowed for i in range(30)] for g in gates]
    assert runs[0] == runs[1] and 3 < runs[0].count(False) < 27
    assert REGISTRY["permission.deny_or_delay"].safety == SAFETY["permission.deny_or_delay"]


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a system python3")
def test_installed_hook_given_a_yaml_plan_blocks_and_says_why(tmp_path):
    install_hook(tmp_path)
    (tmp_path / "plan.yaml").write_text(plan_text(mode="deny"))
    proc = subprocess.run(
        ["/usr/bin/python3", str(tmp_path / ".mitmchaos/hooks/pretooluse.py")],
        input=json.dumps({"tool_name": "Bash", "tool_input": {"command": "ls"}}),
        text=True,
        capture_output=True,
        timeout=30,
        check=False,
        env={"MITMCHAOS_PLAN": str(tmp_path / "plan.yaml"), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2 and "gate_plan_json" in proc.stderr
