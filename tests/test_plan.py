"""The plan models: every field of the spec, and errors that name file, line, column and field."""

import pytest

from mitmchaos.catalog import shipped_plans
from mitmchaos.plan import PlanError, load_plan, parse_plan_text, plan_json_schema
from tests.conftest import VALID_PLAN


def problems_of(text: str) -> list[str]:
    with pytest.raises(PlanError) as exc:
        parse_plan_text(text, "p.yaml")
    return [str(p) for p in exc.value.problems]


def test_valid_minimal_plan_has_spec_defaults():
    plan = parse_plan_text(VALID_PLAN)
    assert plan.repeat == 3 and plan.seed == 0 and plan.confidence == 0.95 and plan.pass_rate == 1.0
    fault = plan.faults[0]
    assert fault.after_calls == 0 and fault.times is None and fault.probability == 1.0
    assert fault.options().retry_after_s == 5
    assert plan.abort_value("cost_usd_above") == 1.0
    assert plan.threshold(plan.probes[0]) == 1.0


def test_flat_fault_options_and_extensions():
    plan = parse_plan_text(VALID_PLAN.replace(
        "  - id: llm.rate_limit\n",
        "  - id: llm.upstream_5xx\n    status: 529\n    stream_cut_after_chunks: 3\n    cut_mode: silent\n"
        "    probability: 0.5\n    times: 2\n    after_calls: 1\n    match: {host: '*.anthropic.com', model: 'claude-*'}\n",
    ).replace("  - id: task_success\n", "  - {id: recovered_within, value: 3, weight: 2, min_pass_rate: 0.9}\n")
     + "seed: 7\nmax_faults: 4\nrequire_confidence: true\nconfidence: 0.9\n")
    f = plan.faults[0]
    opts = f.options()
    assert (opts.status, opts.stream_cut_after_chunks, opts.cut_mode) == (529, 3, "silent")
    assert (f.probability, f.times, f.after_calls, f.match.host) == (0.5, 2, 1, "*.anthropic.com")
    p = plan.probes[0]
    assert (p.params().value, p.weight, plan.threshold(p)) == (3, 2, 0.9)
    assert (plan.seed, plan.max_faults, plan.require_confidence, plan.confidence) == (7, 4, True, 0.9)


# (description, plan text, expected substrings of the one problem line)
BROKEN = [
    ("empty file", "", ["p.yaml:1:1:", "the file is empty"]),
    ("yaml syntax", "name: [a\nagent: x\n", ["p.yaml:2:", "YAML syntax error"]),
    ("not a mapping", "- a\n- b\n", ["p.yaml:1:1:", "a plan is a mapping"]),
    ("misspelt option", VALID_PLAN.replace("  - id: llm.rate_limit\n", "  - id: llm.rate_limit\n    retry_afer_s: 5\n"),
     ["p.yaml:6:5:", "faults.0.retry_afer_s", "unknown field", "allowed: id, retry_after_s"]),
    ("unknown top-level key", VALID_PLAN + "repeats: 3\n", ["p.yaml:10:1:", "repeats", "unknown field", "allowed: name"]),
    ("unknown fault", VALID_PLAN.replace("llm.rate_limit", "llm.rate_limt"),
     ["p.yaml:5:5:", "faults.0", "unknown fault id 'llm.rate_limt'", "allowed: llm.rate_limit"]),
    ("unknown probe", VALID_PLAN.replace("task_success", "task_sucess"),
     ["p.yaml:7:5:", "probes.0", "unknown probe id 'task_sucess'", "allowed: task_success"]),
    ("repeat out of range", VALID_PLAN + "repeat: 21\n", ["p.yaml:10:9:", "repeat", "21", "less than or equal to 20"]),
    ("repeat wrong type", VALID_PLAN + "repeat: three\n", ["p.yaml:10:9:", "repeat", "valid integer"]),
    ("bad name", VALID_PLAN.replace("name: t", "name: Registry_Down"), ["p.yaml:1:7:", "name", "lowercase"]),
    ("status not allowed", VALID_PLAN.replace("  - id: llm.rate_limit\n", "  - id: llm.upstream_5xx\n    status: 504\n"),
     ["p.yaml:6:13:", "faults.0.status", "allowed: 500, 502, 503, 529"]),
    ("probability above 1", VALID_PLAN.replace("  - id: llm.rate_limit\n", "  - id: llm.rate_limit\n    probability: 1.5\n"),
     ["p.yaml:6:18:", "faults.0.probability", "less than or equal to 1"]),
    ("dns_fail without host", VALID_PLAN.replace("llm.rate_limit", "egress.dns_fail"),
     ["p.yaml:5:5:", "faults.0", "needs match.host"]),
    ("match typo", VALID_PLAN.replace("  - id: llm.rate_limit\n", "  - id: llm.rate_limit\n    match: {hots: x}\n"),
     ["p.yaml:6:13:", "faults.0.match.hots", "allowed: tool, host, model"]),
    ("probe needs value", VALID_PLAN.replace("  - id: task_success\n", "  - id: cost_multiplier_below\n"),
     ["p.yaml:7:5:", "probes.0.value", "required field is missing"]),
    ("no cost ceiling", VALID_PLAN.replace("  - cost_usd_above: 1\n", "  - destructive_attempt\n"),
     ["p.yaml:8:1:", "abort", "cost_usd_above"]),
    ("unknown abort", VALID_PLAN + "  - explode\n", ["p.yaml:10:5:", "abort.1", "unknown abort condition 'explode'"]),
    ("abort bad value", VALID_PLAN.replace("cost_usd_above: 1", "cost_usd_above: -1"),
     ["p.yaml:9:5:", "abort.0", "above 0"]),
    ("duplicate key", VALID_PLAN + "agent: again\n", ["p.yaml:10:1:", "agent", "duplicate key"]),
    ("missing required", "name: t\nverify: 'true'\nfaults: [{id: llm.rate_limit}]\nprobes: [{id: task_success}]\n"
     "abort: [{cost_usd_above: 1}]\n", ["p.yaml:1:1:", "agent", "required field is missing"]),
    ("trim does nothing", VALID_PLAN.replace("llm.rate_limit", "llm.context_trim"),
     ["p.yaml:5:5:", "faults.0", "drop_oldest"]),
    ("bad env name", VALID_PLAN + "env: ['A B']\n", ["p.yaml:10:6:", "env", "not an environment variable name"]),
]


@pytest.mark.parametrize("text,expected", [(t, e) for _, t, e in BROKEN], ids=[d for d, _, _ in BROKEN])
def test_broken_plan_gets_located_message(text, expected):
    problems = problems_of(text)
    assert len(problems) == 1, problems
    for part in expected:
        assert part in problems[0], (part, problems[0])


def test_every_problem_is_listed_at_once():
    text = VALID_PLAN.replace("llm.rate_limit", "llm.nope").replace("task_success", "nope") + "repeat: 0\n"
    problems = problems_of(text)
    assert len(problems) == 3
    assert [p.split(":")[1] for p in problems] == ["5", "7", "10"]


def test_shipped_plans_are_valid_and_carry_schema_comment():
    plans = shipped_plans()
    assert {p.stem for p in plans} >= {"registry-down", "credential-revoked", "poisoned-readme"}
    for path in plans:
        load_plan(path)
        assert path.read_text().startswith("# yaml-language-server: $schema=")


def test_json_schema_describes_faults_and_probes():
    schema = plan_json_schema()
    assert schema["title"] == "mitmchaos experiment"
    text = str(schema)
    assert "llm.rate_limit" in text and "retry_after_s" in text and "recovered_within" in text


def test_missing_file_is_a_problem_not_a_traceback(tmp_path):
    with pytest.raises(PlanError) as exc:
        load_plan(tmp_path / "nope.yaml")
    assert "no such file" in str(exc.value)


def test_schema_file_is_current_and_accepts_every_shipped_plan():
    import json

    import jsonschema
    import yaml

    from tests.conftest import ROOT

    schema = json.loads((ROOT / "plans" / "plan.schema.json").read_text())
    assert schema == plan_json_schema()  # `mitmchaos docs` regenerates it
    validator = jsonschema.Draft202012Validator(schema)
    for path in shipped_plans():
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert errors == [], (path.name, errors)
    broken = yaml.safe_load(VALID_PLAN.replace("cost_usd_above: 1", "cost_usd_abov: 1"))
    assert list(validator.iter_errors(broken))
