"""Suites and sweeps: expansion with one baseline per task, located file errors, the comparison
table and the resilience curve with its breaking point, from synthetic results."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mitmchaos.cli import main
from mitmchaos.plan import PlanError, load_plan
from mitmchaos.report.comparison import render_suite_markdown, render_suite_text, write_suite_reports
from mitmchaos.report.curve import curve_svg, render_sweep_text, write_sweep_reports, x_positions
from mitmchaos.scoring import EXIT_CODES, PhaseStats, ProbeOutcome, RunResult
from mitmchaos.rundir import load_run
from mitmchaos.run import RunOutcome, RunSettings
from mitmchaos.suite import Experiment, ScoredExperiment, SuiteResult, compare, load_suite, run_expansions
from mitmchaos.sweep import SweepPoint, SweepResult, load_sweep

from .repetitions import CANARY, fault, loaded, write_repetition

TASK = """\
name: {name}
agent: run-agent
verify: "true"
repeat: 3
faults:
  - id: llm.rate_limit
probes:
  - {{ id: failure_surfaced, weight: 3 }}
  - {{ id: task_success }}
abort:
  - cost_usd_above: 1
stand_ins:
  - {{ host: pypi.example.test, dir: site }}
"""

SUITE = """\
name: two-by-three
repeat: 2
tasks:
  - plan: tasks/alpha.yaml
  - plan: tasks/beta.yaml
    name: renamed-beta
fault_sets:
  - name: index-down
    faults:
      - {id: egress.dns_fail, match: {host: pypi.example.test}}
  - name: rate-limited
    faults:
      - {id: llm.rate_limit, times: 1}
  - name: overloaded
    faults:
      - {id: llm.upstream_5xx, status: 529}
      - {id: llm.latency, delay_s: 2}
"""

SWEEP = """\
name: retries
plan: tasks/alpha.yaml
fault: {{id: llm.upstream_5xx, status: 503}}
parameter: {parameter}
values: {values}
probes:
  - {{id: task_success, weight: 4}}
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "tasks").mkdir()
    for name in ("alpha", "beta"):
        (tmp_path / "tasks" / f"{name}.yaml").write_text(TASK.format(name=name))

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def problems(load, path: Path) -> list[str]:
    with pytest.raises(PlanError) as raised:
        load(path)
    return [str(p) for p in raised.value.problems]


# ---------------------------------------------------------------- expansion


def test_suite_expands_tasks_by_fault_sets_with_one_baseline_per_task(files, tmp_path):
    suite, expansions = load_suite(files("suite.yaml", SUITE))
    assert suite.name == "two-by-three"
    assert [(e.task, e.baseline.name) for e in expansions] == [
        ("alpha", "alpha-baseline"),
        ("renamed-beta", "renamed-beta-baseline"),
    ]
    for expansion in expansions:
        assert [e.label for e in expansion.experiments] == ["index-down", "rate-limited", "overloaded"]
        assert [e.name for e in expansion.experiments] == [
            f"{expansion.task}-{s}" for s in ("index-down", "rate-limited", "overloaded")
        ]
    alpha = expansions[0]
    overloaded = alpha.experiments[2].plan
    assert overloaded["name"] == "alpha-overloaded" and overloaded["repeat"] == 2  # the suite's repeat wins
    assert overloaded["faults"] == [
        {"id": "llm.upstream_5xx", "status": 529},
        {"id": "llm.latency", "delay_s": 2.0},
    ]
    assert overloaded["probes"] == [{"id": "failure_surfaced", "weight": 3}, {"id": "task_success"}]
    assert overloaded["stand_ins"][0]["dir"] == str(tmp_path / "tasks" / "site")  # loadable from anywhere
    assert alpha.baseline.plan["faults"] == alpha.experiments[0].plan["faults"]  # never fire in the baseline
    assert alpha.source == tmp_path / "tasks" / "alpha.yaml"
    _, quick = load_suite(files("suite.yaml", SUITE), repeat=1)
    assert {e.plan["repeat"] for t in quick for e in [t.baseline, *t.experiments]} == {1}


def test_sweep_expands_one_experiment_per_value_and_replaces_probes(files):
    sweep, (expansion,) = load_sweep(files("sweep.yaml", SWEEP.format(parameter="times", values="[1, 2, 4]")))
    assert sweep.break_below == 50 and expansion.baseline.name == "alpha-baseline"
    assert [(e.name, e.label) for e in expansion.experiments] == [
        ("alpha-times-1", "1"),
        ("alpha-times-2", "2"),
        ("alpha-times-4", "4"),
    ]
    assert [e.plan["faults"] for e in expansion.experiments] == [
        [{"id": "llm.upstream_5xx", "status": 503, "times": n}] for n in (1, 2, 4)
    ]
    assert expansion.baseline.plan["probes"] == [{"id": "task_success", "weight": 4.0}]
    _, (latency,) = load_sweep(files("s.yaml", SWEEP.format(parameter="status", values="[500, 529]")))
    assert [e.name for e in latency.experiments] == ["alpha-status-500", "alpha-status-529"]


def test_each_baseline_runs_once_and_every_experiment_is_scored_with_it(files, tmp_path, monkeypatch):
    _, expansions = load_suite(files("suite.yaml", SUITE), repeat=1)
    executed = []

    def execute(settings: RunSettings) -> RunOutcome:  # what the runner records, without containers
        plan = load_plan(settings.plan_path)
        executed.append((plan.name, settings.phases))
        artifacts = settings.out.with_suffix("")
        broken_baseline = plan.name == "renamed-beta-baseline"
        records = [
            write_repetition(
                artifacts,
                "baseline",
                0,
                [loaded(0, plan.faults[0].id)],
                "done",
                verify_exit=1 if broken_baseline else 0,
            )
            if phase == "baseline"
            else write_repetition(
                artifacts,
                "faulted",
                0,
                [loaded(0, plan.faults[0].id), fault(1, plan.faults[0].id)],
                f"failed: {CANARY}",
                verify_exit=1,
            )
            for phase in settings.phases
        ]
        return RunOutcome(
            settings.plan_path, plan, "r", settings.out, artifacts, records, [], broken_baseline
        )

    monkeypatch.setattr("mitmchaos.suite.execute", execute)
    runs = run_expansions(
        expansions, tmp_path / "out", RunSettings(tmp_path / "suite.yaml", progress=io.StringIO())
    )
    assert executed == [
        ("alpha-baseline", ("baseline",)),
        ("alpha-index-down", ("faulted",)),
        ("alpha-rate-limited", ("faulted",)),
        ("alpha-overloaded", ("faulted",)),
        ("renamed-beta-baseline", ("baseline",)),
    ]  # beta's baseline fails verify: no faulted runs
    assert [(r.experiment.name, r.result.verdict) for r in runs] == [
        ("alpha-index-down", "scored"),
        ("alpha-rate-limited", "scored"),
        ("alpha-overloaded", "scored"),
        ("renamed-beta-index-down", "invalid"),
        ("renamed-beta-rate-limited", "invalid"),
        ("renamed-beta-overloaded", "invalid"),
    ]
    alpha = runs[0].result
    assert [(r.phase, r.verify_exit) for r in alpha.repetitions] == [("baseline", 0), ("faulted", 1)]
    assert [p.status for p in alpha.probes] == ["ok", "FAIL"]  # failure surfaced, task failed
    saved = load_run(tmp_path / "out" / "alpha-overloaded")
    assert [r.artifacts for r in saved.records] == [
        tmp_path / "out" / "alpha-overloaded" / "../alpha-baseline/baseline-1",
        tmp_path / "out" / "alpha-overloaded" / "faulted-1",
    ]
    assert (
        saved.plan.faults[0].id == "llm.upstream_5xx"
        and (tmp_path / "out" / "alpha-overloaded.html").is_file()
    )


# ---------------------------------------------------------------- located errors


def test_suite_file_errors_are_located(files, tmp_path):
    bad = (
        SUITE.replace("{id: llm.rate_limit, times: 1}", "{id: llm.rate_limit, tims: 1}")
        .replace("egress.dns_fail", "egress.dns_fial")
        .replace("name: overloaded", "name: Overloaded")
    )
    found = problems(load_suite, files("suite.yaml", bad))
    assert found[0].startswith(
        f"{tmp_path}/suite.yaml:10:9: fault_sets.0.faults.0: unknown fault id "
        "'egress.dns_fial' (allowed: llm.rate_limit, "
    )
    assert found[1:] == [
        f"{tmp_path}/suite.yaml:13:30: fault_sets.1.faults.0.tims: unknown field 'tims' "
        "(allowed: id, retry_after_s, match, after_calls, times, probability)",
        f"{tmp_path}/suite.yaml:14:11: fault_sets.2.name: 'Overloaded': use lowercase letters, digits and "
        "hyphens (e.g. registry-down)",
    ]


def test_suite_task_problems_point_at_the_suite_or_the_task_plan(files, tmp_path):
    missing = SUITE.replace("tasks/beta.yaml", "tasks/gamma.yaml").replace(
        "name: rate-limited", "name: index-down"
    )
    found = problems(load_suite, files("suite.yaml", missing))
    assert f"{tmp_path}/suite.yaml:5:11: tasks.1.plan: no plan file '{tmp_path}/tasks/gamma.yaml'" in found
    assert any(
        ":11:11:" in p and "fault_sets.1.name: fault set 'index-down' is named twice" in p for p in found
    )
    (tmp_path / "tasks" / "beta.yaml").write_text(TASK.format(name="beta").replace("repeat: 3", "repeat: 99"))
    found = problems(load_suite, files("suite.yaml", SUITE))
    assert found == [f"{tmp_path}/tasks/beta.yaml:4:9: repeat: 99: input should be less than or equal to 20"]


def test_sweep_parameter_and_every_value_are_checked_against_the_fault(files, tmp_path):
    found = problems(load_sweep, files("sweep.yaml", SWEEP.format(parameter="delay_s", values="[1, 2]")))
    assert len(found) == 1 and found[0].startswith(
        f"{tmp_path}/sweep.yaml:4:12: parameter: llm.upstream_5xx has no option 'delay_s' (allowed: "
    )
    assert "stream_cut_after_chunks" in found[0] and "'match'" not in found[0]
    found = problems(
        load_sweep, files("sweep.yaml", SWEEP.format(parameter="status", values="[503, 404, 503]"))
    )
    assert found[0].startswith(
        f"{tmp_path}/sweep.yaml:5:15: values.1: status=404: Input should be 500, 502, 503"
    )
    assert found[1] == f"{tmp_path}/sweep.yaml:5:20: values.2: 503 is listed twice"
    found = problems(load_sweep, files("sweep.yaml", SWEEP.format(parameter="times", values="[1]")))
    assert found == [
        f"{tmp_path}/sweep.yaml:5:9: values: List should have at least 2 items after validation, not 1"
    ]


def test_suite_command_lists_every_problem_and_exits_2(files, tmp_path):
    path = files("suite.yaml", SUITE.replace("fault_sets:", "fault_set:"))
    result = CliRunner().invoke(main, ["suite", str(path)])
    assert result.exit_code == 2
    assert f"{path}:7:1: fault_set: unknown field 'fault_set'" in result.output
    assert f"{path}:1:1: fault_sets: required field is missing" in result.output


# ---------------------------------------------------------------- the comparison table


def probe(
    index: int, label: str, faulted: tuple[int, int], baseline: tuple[int, int], threshold=1.0
) -> ProbeOutcome:
    f, b = PhaseStats(*faulted), PhaseStats(*baseline)
    f.finish(0.95)
    b.finish(0.95)
    status = "n/a" if not f.runs else "ok" if f.rate >= threshold else "FAIL"
    return ProbeOutcome(index, label, label, "availability", 1, threshold, b, f, status)


def result(probes: list[ProbeOutcome], score: float | None, verdict: str = "scored") -> RunResult:
    outcome = (
        None
        if verdict != "scored"
        else "weakness_found"
        if any(p.status == "FAIL" for p in probes)
        else "hypothesis_held"
    )
    return RunResult(
        plan={"name": "t"},
        verdict=verdict,
        exit_code=EXIT_CODES[verdict],
        outcome=outcome,
        reasons=[],
        score=score,
        confidence=0.95,
        probes=probes,
        repetitions=[],
        warnings=[],
        malformed_lines=0,
    )


def scored(tmp_path: Path, task: str, label: str, res: RunResult) -> ScoredExperiment:
    name = f"{task}-{label}"
    return ScoredExperiment(Experiment(name, task, label, {}), res, tmp_path / "suite" / f"{name}.json")


@pytest.fixture
def suite_result(tmp_path):
    def row(label, surfaced, task, recovers, score):
        return scored(
            tmp_path,
            "vendor",
            label,
            result(
                [
                    probe(0, "failure_surfaced", surfaced, (0, 0)),
                    probe(1, "task_success", task, (3, 3)),
                    probe(2, "recovered_within(3)", recovers, (3, 3), threshold=0.5),
                ],
                score,
            ),
        )

    return SuiteResult(
        "spof",
        "Which fault hurts?",
        [
            row("index-down", (3, 3), (0, 3), (0, 0), 75.0),  # task fails: a single point of failure
            row("rate-limited", (3, 3), (3, 3), (3, 3), 100.0),  # routed around
            row("slow-model", (3, 3), (3, 3), (2, 3), 88.9),  # still above 50%, but below the baseline
        ],
    )


def test_comparison_marks_which_fault_hurts_which_probe(suite_result):
    (table,) = compare(suite_result.runs)
    assert table.task == "vendor" and table.probes == [
        "failure_surfaced",
        "task_success",
        "recovered_within(3)",
    ]
    hurt = {
        row.run.experiment.label: [(c.below_threshold, c.below_baseline) for c in row.cells]
        for row in table.rows
    }
    assert hurt == {
        "index-down": [(False, False), (True, True), (False, False)],
        "rate-limited": [(False, False)] * 3,
        "slow-model": [(False, False), (False, False), (False, True)],
    }
    text = render_suite_text(suite_result)
    lines = text.splitlines()
    assert lines[0] == "suite      : spof (exit 0)"
    assert lines[4].split() == ["baseline", "(shared)", "n/a", "3/3", "3/3"]
    assert lines[5].split() == ["index-down", "75.0", "weakness", "found", "3/3", "✗▼", "0/3", "n/a"]
    assert lines[7].split() == ["slow-model", "88.9", "hypothesis", "held", "3/3", "3/3", "▼", "2/3"]
    assert "  P2 = task_success" in lines


def test_suite_markdown_and_html_show_intervals_and_link_each_report(suite_result, tmp_path):
    md = render_suite_markdown(suite_result, tmp_path / "spof.md")
    assert "| *baseline (shared)* | | | not evaluated | 3/3 (100%) 43%–100% | 3/3 (100%) 43%–100% |" in md
    assert (
        "| [index-down](suite/vendor-index-down.md) | 75.0 | weakness found | 3/3 (100%) 43%–100% | "
        "✗▼ 0/3 (0%) 0%–57% | not evaluated |"
    ) in md
    paths = write_suite_reports(suite_result, tmp_path / "spof.json")
    assert set(paths) == {"json", "text", "markdown", "html"}
    html = paths["html"].read_text()
    assert (
        html.count('<table class="compare">') == 1 and html.count("<tr>") == 5
    )  # header, baseline, 3 fault sets
    assert '<a href="suite/vendor-slow-model.html">slow-model</a>' in html
    assert 'style="background:#fee2e2"' in html and "✗▼" in html
    data = json.loads(paths["json"].read_text())
    (task,) = data["tasks"]
    assert [r["fault_set"] for r in task["rows"]] == ["index-down", "rate-limited", "slow-model"]
    assert task["rows"][0]["report"] == "suite/vendor-index-down.json"
    assert task["rows"][0]["cells"][1] == {
        "status": "FAIL",
        "faulted": task["rows"][0]["cells"][1]["faulted"],
        "below_threshold": True,
        "below_baseline": True,
    }


# ---------------------------------------------------------------- the curve


def sweep_of(tmp_path: Path, values: list, scores: list[float | None], task_passes: list[int]) -> SweepResult:
    points = [
        SweepPoint(
            v,
            scored(
                tmp_path,
                "vendor",
                f"times-{v}",
                result(
                    [probe(0, "task_success", (passes, 2), (2, 2))],
                    score,
                    "scored" if score is not None else "invalid",
                ),
            ),
        )
        for v, score, passes in zip(values, scores, task_passes)
    ]
    return SweepResult("retries", "", "llm.upstream_5xx", "times", 50, points)


def test_breaking_point_and_shape(tmp_path):
    cliff = sweep_of(tmp_path, [1, 2, 3, 4], [100, 100, 20, 20], [2, 2, 0, 0])
    assert cliff.breaking_point().value == 3 and cliff.shape() == "cliff-edge"
    assert [p.value for p in cliff.steepest_drop()[:2]] == [2, 3]
    slope = sweep_of(tmp_path, [0, 0.25, 0.5, 0.75, 1.0], [100, 80, 60, 45, 25], [2, 2, 1, 1, 0])
    assert slope.breaking_point().value == 0.75 and slope.shape() == "gradual"
    held = sweep_of(tmp_path, [1, 2], [90, 95], [2, 2])
    assert held.breaking_point() is None and held.shape() == "flat"
    gap = sweep_of(tmp_path, [1, 2, 3], [100, None, 40], [2, 0, 1])  # an invalid value is skipped, not a zero
    assert gap.breaking_point().value == 3 and gap.steepest_drop()[2] == 60
    assert gap.exit_code == 2
    text = render_sweep_text(cliff)
    assert "breaking point: times = 3 (score 20.0 < 50)" in text
    assert "shape: cliff-edge: the steepest step loses 80.0 points, from 2 (100.0) to 3 (20.0)" in text


def test_x_axis_is_to_scale_for_numbers_and_even_otherwise():
    assert x_positions([0, 0.25, 1.0]) == [0, 0.25, 1.0]
    assert x_positions([1, 2, 4, 8]) == [0, 1 / 7, 3 / 7, 1]
    assert x_positions(["reset", "silent"]) == [0, 1]
    assert x_positions([True, False, True]) == [0, 0.5, 1]


def test_curve_html_draws_score_bands_threshold_and_breaking_point(tmp_path):
    cliff = sweep_of(tmp_path, [1, 2, 3, 4], [100, 100, 20, 20], [2, 2, 0, 0])
    svg = curve_svg(cliff)
    assert svg.count("<polyline") == 2  # the score and the probe
    assert svg.count("<polygon") == 1  # the probe's interval band
    assert 'stroke-dasharray="6 4"' in svg  # break_below
    assert ">breaks at 3</text>" in svg
    paths = write_sweep_reports(cliff, tmp_path / "retries.json")
    html = paths["html"].read_text()
    assert "<h2>Resilience curve</h2>" in html and "<svg" in html
    assert "breaking point: times = 3 (score 20.0 &lt; 50)" in html
    assert '<a href="suite/vendor-times-3.html">3</a>' in html
    data = json.loads(paths["json"].read_text())
    assert (
        data["breaking_value"] == 3 and data["shape"] == "cliff-edge" and data["probes"] == ["task_success"]
    )
    assert [p["score"] for p in data["points"]] == [100, 100, 20, 20]
    held = curve_svg(sweep_of(tmp_path, [1, 2], [90, 95], [2, 2]))
    assert "breaks at" not in held
