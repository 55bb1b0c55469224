"""`mitmchaos list|validate|schema|docs` as a user runs them: real processes, no tracebacks."""

import json
import subprocess

from tests.conftest import BIN, ROOT, VALID_PLAN, cli_env


def run(*args, cwd=ROOT):
    return subprocess.run([str(BIN / "mitmchaos"), *args], capture_output=True, text=True, cwd=cwd, env=cli_env())


def test_list_prints_every_fault_and_the_plans_directory():
    out = run("list")
    assert out.returncode == 0, out.stderr
    for fault in ("llm.rate_limit", "llm.upstream_5xx", "llm.context_trim", "llm.model_degrade", "tool.error",
                  "tool.stale_data", "mcp.toolset_change", "permission.deny_or_delay", "inject.tool_result",
                  "egress.dns_fail", "egress.credential_401"):
        assert fault in out.stdout
    assert "registry-down.yaml" in out.stdout and "Shipped plans in" in out.stdout


def test_list_json_is_machine_readable():
    data = json.loads(run("list", "--json").stdout)
    by_id = {f["id"]: f for f in data["faults"]}
    assert by_id["egress.dns_fail"]["requires"] == ["match.host"]
    assert by_id["llm.rate_limit"]["options"]["retry_after_s"]["default"] == 5
    assert by_id["llm.context_trim"]["safety"] == "mutating"
    assert any(p.endswith("poisoned-readme.yaml") for p in data["plans"])


def test_validate_shipped_plans_exit_zero():
    out = run("validate", *[str(p) for p in sorted((ROOT / "plans").glob("*.yaml"))])
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(": ok") >= 3


def test_validate_lists_problems_of_every_file_without_traceback(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(VALID_PLAN)
    bad1 = tmp_path / "bad1.yaml"
    bad1.write_text(VALID_PLAN.replace("llm.rate_limit", "llm.nope"))
    bad2 = tmp_path / "bad2.yaml"
    bad2.write_text("name: [\n")
    out = run("validate", str(bad1), str(good), str(bad2), str(tmp_path / "missing.yaml"))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr + out.stdout
    assert f"{bad1}:5:5: faults.0: unknown fault id 'llm.nope'" in out.stderr
    assert f"{bad2}:2:1: YAML syntax error" in out.stderr
    assert "missing.yaml:1:1: no such file" in out.stderr
    assert f"{good}: ok" in out.stdout
    assert "3 of 4 plan(s) invalid" in out.stderr


def test_schema_is_json_schema():
    schema = json.loads(run("schema").stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert set(schema["required"]) >= {"name", "agent", "verify", "faults", "probes", "abort"}


def test_readme_catalog_is_generated_from_registry():
    out = run("docs", "--check", "README.md")
    assert out.returncode == 0, out.stderr
    assert "| `llm.rate_limit` |" in (ROOT / "README.md").read_text()
