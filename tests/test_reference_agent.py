"""The reference agent end to end through a real mitmdump whose scripted-model stand-in answers
api.anthropic.com, under the offline registry-down plan, for both behaviours (no container)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from mitmchaos.examples import find_plan, scratch_project
from tests.egress_support import client_env, run

AGENT = Path(__file__).resolve().parent.parent / "sandbox" / "agent" / "mitmchaos_agent.py"
BIN = str(Path(sys.executable).parent)  # pip and python3 of the test venv, as the sandbox has its own

pytestmark = pytest.mark.slow


def registry_down(tmp_path: Path, behaviour: str, faulted: bool) -> tuple[Path, str]:
    """The shipped plan for ``behaviour`` (faults switched off for a baseline), and the agent's task."""
    plan = scratch_project(find_plan("offline-registry-down"), tmp_path / "project", behaviour)
    data = yaml.safe_load(plan.read_text())
    if not faulted:
        for fault in data["faults"]:
            fault["probability"] = 0
    plan.write_text(yaml.safe_dump(data))
    program, task = shlex.split(data["agent"])
    assert program == "mitmchaos-agent"
    return plan, task


def run_agent(proxy, task: str, workdir: Path):
    workdir.mkdir()
    env = client_env(
        proxy, ANTHROPIC_API_KEY="sk-mitmchaos-scripted-model", PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}"
    )
    return run([sys.executable, str(AGENT), task], env, cwd=workdir, timeout=180)


def test_baseline_vendors_the_package_and_reports_done(chaos_proxy, tmp_path):
    plan, task = registry_down(tmp_path, "careful", faulted=False)
    proxy = chaos_proxy(plan)
    done = run_agent(proxy, task, tmp_path / "work")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "work" / "vendor" / "tinylib" / "__init__.py").exists()
    assert done.stdout.startswith("Done. Every step succeeded")
    assert "$ pip install" in done.stderr  # steps go to stderr, the answer to stdout
    calls = proxy.events("llm_call")
    assert len(calls) == 3 and all(c["status"] == 200 and c["cost_usd"] > 0 for c in calls)
    assert calls[0]["usage"]["input_tokens"] > 100 and calls[0]["usage"]["output_tokens"] > 10


@pytest.mark.parametrize("behaviour", ["careful", "reckless"])
def test_registry_down_careful_reports_the_canary_reckless_claims_success(chaos_proxy, tmp_path, behaviour):
    plan, task = registry_down(tmp_path, behaviour, faulted=True)
    proxy = chaos_proxy(plan)
    done = run_agent(proxy, task, tmp_path / "work")
    assert done.returncode == 0, done.stderr
    assert [e["fault"] for e in proxy.events("fault_injected")][:1] == ["egress.dns_fail"]
    assert proxy.canary in done.stderr  # pip printed the injected error
    calls = proxy.events("llm_call")
    if behaviour == "careful":
        assert proxy.canary in done.stdout and "failed" in done.stdout
        assert len(calls) == 2  # the failed step, then the report: it stops
    else:
        assert proxy.canary not in done.stdout
        assert "all steps completed successfully" in done.stdout
        assert len(calls) == 3  # it ran the import check anyway


def test_an_api_error_ends_the_agent_with_the_message_on_stdout(chaos_proxy, tmp_path):
    plan, task = registry_down(tmp_path, "careful", faulted=False)
    data = yaml.safe_load(plan.read_text())
    data["faults"] = [{"id": "llm.rate_limit", "retry_after_s": 0}]
    plan.write_text(yaml.safe_dump(data))
    proxy = chaos_proxy(plan)
    done = run_agent(proxy, task, tmp_path / "work")
    assert done.returncode == 1
    assert done.stdout.startswith("API error:") and proxy.canary in done.stdout
    assert len(proxy.events("fault_injected")) == 3  # the SDK's own two retries, capped


def test_a_cut_stream_ends_the_agent_with_an_api_error_not_a_traceback(chaos_proxy, tmp_path):
    plan, task = registry_down(tmp_path, "careful", faulted=False)
    data = yaml.safe_load(plan.read_text())
    data["faults"] = [{"id": "llm.upstream_5xx", "stream_cut_after_chunks": 2}]
    plan.write_text(yaml.safe_dump(data))
    proxy = chaos_proxy(plan)
    done = run_agent(proxy, task, tmp_path / "work")
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("API error:") and "Traceback" not in done.stderr
