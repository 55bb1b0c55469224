"""Verdicts, score, warnings and the run directory, over hand-written repetitions."""

from __future__ import annotations

import json
import threading
import tracemalloc
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from mitmchaos.judge import ask_judge, parse_judgement
from mitmchaos.plan import parse_plan_text
from mitmchaos.probes import REGISTRY
from mitmchaos.probes.evidence import JudgeVerdict
from mitmchaos.rundir import RunDirError, load_run, save_run
from mitmchaos.scoring import RunResult, score

from .repetitions import CANARY, call, event, fault, llm, loaded, result, write_repetition

PLAN = """\
name: t
agent: run-agent
verify: "true"
repeat: 3
{extra}
faults:
  - id: llm.rate_limit
    times: 1
probes:
  - {{ id: failure_surfaced, weight: 3 }}
  - {{ id: task_success, weight: 1 }}
  - {{ id: cost_multiplier_below, weight: 2, value: 3 }}
abort:
  - cost_usd_above: 2
"""


def plan(extra: str = ""):
    return parse_plan_text(PLAN.format(extra=extra))


def baseline(tmp_path, n=3, cost=0.01, **kw):
    return [write_repetition(tmp_path, "baseline", i, [loaded(0, "llm.rate_limit"), llm(1, cost=cost)], "done", **kw)
            for i in range(n)]


def faulted(tmp_path, i, surfaced=True, fired=True, plan_loaded=True, verify_exit=0, **kw):
    events = [loaded(0, "llm.rate_limit")] if plan_loaded else []
    if fired:
        events += [fault(1, "llm.rate_limit", host="api.anthropic.com", retry_after_s=5),
                   llm(1, status=429, faulted="llm.rate_limit", cost=0.0)]
    events += [llm(7, cost=0.015), call(7.1, "Bash", f"t{i}"), result(7.5, "Bash", f"t{i}")]
    out = f"hit a rate limit: {CANARY}" if surfaced else "done"
    return write_repetition(tmp_path, "faulted", i, events, out, verify_exit=verify_exit, **kw)


def test_scored_with_a_weakness(tmp_path):
    records = baseline(tmp_path) + [faulted(tmp_path, 0), faulted(tmp_path, 1), faulted(tmp_path, 2, surfaced=False)]
    res = score(plan(), records)
    assert (res.verdict, res.exit_code, res.outcome) == ("scored", 0, "weakness_found")
    by_id = {p.id: p for p in res.probes}
    fs = by_id["failure_surfaced"]
    assert (fs.faulted.passes, fs.faulted.runs, fs.status) == (2, 3, "FAIL")
    assert fs.baseline.runs == 0 and fs.baseline.not_evaluated == 3
    assert by_id["task_success"].pass_all is True and by_id["task_success"].pass_hat_k == {"1": 1.0, "2": 1.0}
    # cost 0.015 / 0.01 = 1.5x < 3 in every faulted repetition
    assert by_id["cost_multiplier_below"].faulted.passes == 3
    assert res.score == pytest.approx((3 * 2 / 3 + 1 * 1 + 2 * 1) / 6 * 100, abs=0.05)
    assert "failure_surfaced below its threshold: 2/3" in res.reasons[0]
    assert res.warnings == []
    assert [r.phase for r in res.repetitions] == ["baseline"] * 3 + ["faulted"] * 3
    assert res.repetitions[3].probes[0] == {"passed": True, "detail": f"canary {CANARY} in the agent's output"}


def test_hypothesis_held_round_trips_through_json(tmp_path):
    records = baseline(tmp_path) + [faulted(tmp_path, i) for i in range(3)]
    res = score(plan(), records)
    assert (res.verdict, res.outcome, res.score) == ("scored", "hypothesis_held", 100.0)
    again = RunResult.from_json(json.loads(json.dumps(res.to_json())))
    assert again == res


def test_aborted(tmp_path):
    records = baseline(tmp_path) + [faulted(tmp_path, 0, verify_exit=None, agent_exit=None,
                                            abort={"condition": "cost_usd_above", "value": 2, "observed": 2.4})]
    res = score(plan(), records)
    assert (res.verdict, res.exit_code) == ("aborted", 1)
    assert "abort cost_usd_above (observed 2.4)" in res.reasons[0]
    assert res.score is not None  # covers the probes reached


def test_runner_error_aborts(tmp_path):
    res = score(plan(), baseline(tmp_path) + [faulted(tmp_path, 0, error="proxy never answered")])
    assert res.verdict == "aborted" and "proxy never answered" in res.reasons[0]


def test_baseline_verify_failure_is_invalid(tmp_path):
    records = baseline(tmp_path, verify_exit=1)
    res = score(plan(), records)
    assert (res.verdict, res.exit_code, res.outcome, res.score) == ("invalid", 2, None, None)
    assert "baseline repetition 1 failed verify" in res.reasons[0]


def test_unsteady_baseline_is_inconclusive(tmp_path):
    text = PLAN.format(extra="").replace("  - { id: task_success, weight: 1 }",
                                         "  - { id: completes_within, value: 5 }")
    records = baseline(tmp_path) + [faulted(tmp_path, i) for i in range(3)]  # every repetition took 10 s
    res = score(parse_plan_text(text), records)
    assert (res.verdict, res.exit_code) == ("inconclusive", 2)
    assert "baseline: completes_within(5) passes 0/3" in res.reasons[0]


def test_no_fault_fired_is_invalid_and_says_which_component_never_loaded(tmp_path):
    records = baseline(tmp_path) + [faulted(tmp_path, i, fired=False, plan_loaded=i != 1) for i in range(3)]
    res = score(plan(), records)
    assert (res.verdict, res.exit_code) == ("invalid", 2)
    assert "no fault fired" in res.reasons[0]
    assert any("no proxy reported plan_loaded in faulted repetition(s) 2" in w for w in res.warnings)
    assert any("fault 1 (llm.rate_limit) never fired" in w for w in res.warnings)


def test_require_confidence_makes_an_undecided_rate_inconclusive(tmp_path):
    records = baseline(tmp_path) + [faulted(tmp_path, i) for i in range(3)]
    res = score(plan("pass_rate: 0.9\nrequire_confidence: true"), records)
    assert (res.verdict, res.exit_code, res.outcome) == ("inconclusive", 2, None)
    fs = next(p for p in res.probes if p.id == "failure_surfaced")
    assert fs.status == "undecided" and fs.settle_runs == 35  # 35/35 gives a lower bound of 90.9%
    assert "3/3 (100%, 95% CI 43%-100%) still contains the threshold 90%; about 35 runs" in res.reasons[0]


def test_a_clear_weakness_is_an_answer_even_beside_an_undecided_probe(tmp_path):
    records = baseline(tmp_path) + [faulted(tmp_path, i, surfaced=False) for i in range(3)]
    res = score(plan("pass_rate: 0.9\nrequire_confidence: true"), records)
    statuses = {p.id: p.status for p in res.probes}
    # 0/3 has an interval of 0%-56%, wholly below 90%; 3/3 (43%-100%) still straddles it.
    assert statuses["failure_surfaced"] == "FAIL" and statuses["task_success"] == "undecided"
    assert (res.verdict, res.exit_code, res.outcome) == ("scored", 0, "weakness_found")


def test_threshold_one_is_decided_exactly_even_with_require_confidence(tmp_path):
    records = baseline(tmp_path) + [faulted(tmp_path, i) for i in range(3)]
    res = score(plan("require_confidence: true"), records)
    assert res.verdict == "scored" and all(p.status == "ok" for p in res.probes)


def test_zero_baseline_cost_and_malformed_lines_warn(tmp_path):
    records = baseline(tmp_path, cost=0.0) + [faulted(tmp_path, 0, malformed=["{oops", "[1,2]"])]
    res = score(plan(), records)
    cm = next(p for p in res.probes if p.id == "cost_multiplier_below")
    assert cm.faulted.runs == 0 and cm.status == "n/a"
    assert any("baseline cost was 0" in w for w in res.warnings)
    assert any("ignored 2 malformed event line(s) (faulted 1: 2)" in w for w in res.warnings)
    assert res.malformed_lines == 2


def test_judge_is_asked_once_per_repetition_before_the_probes(tmp_path):
    text = PLAN.format(extra="").replace(
        "  - { id: task_success, weight: 1 }",
        "  - { id: judge, criterion: reports the rate limit, endpoint: 'http://127.0.0.1:9/v1', model: g }")
    asked = []

    def fake_judge(params, output):
        asked.append(output)
        return JudgeVerdict(1.0 if CANARY in output else 0.0, "graded")

    records = baseline(tmp_path) + [faulted(tmp_path, 0), faulted(tmp_path, 1, surfaced=False)]
    res = score(parse_plan_text(text), records, judge=fake_judge)
    assert len(asked) == 5
    judge = next(p for p in res.probes if p.id == "judge")
    assert (judge.faulted.passes, judge.faulted.runs) == (1, 2)
    # A rebuilt report reuses the stored answers: the judge is a sampled model, and the rebuild is offline.
    again = score(parse_plan_text(text), records, judge=lambda p, out: pytest.fail("asked again"))
    assert again.to_json() == res.to_json()


def test_an_unreachable_judge_is_not_evaluated_and_asked_again_next_time(tmp_path):
    text = PLAN.format(extra="").replace(
        "  - { id: task_success, weight: 1 }",
        "  - { id: judge, criterion: c, endpoint: 'http://127.0.0.1:9/v1', model: g }")
    records = baseline(tmp_path, n=1) + [faulted(tmp_path, 0)]
    res = score(parse_plan_text(text), records, judge=lambda p, out: JudgeVerdict(None, "connection refused"))
    judge = next(p for p in res.probes if p.id == "judge")
    assert judge.status == "n/a" and "connection refused" in res.repetitions[1].probes[1]["detail"]
    assert not (records[1].artifacts / "judge.json").exists()


def test_scoring_streams_events_in_bounded_memory(tmp_path):
    lines = [loaded(0, "llm.rate_limit"), fault(1, "llm.rate_limit", host="h"), llm(2)]
    lines += [event("dns_query", 3 + i * 1e-6, "resolver", name=f"n{i}.test", qtype="A", rcode="NOERROR",
                    faulted=False, transport="udp") for i in range(70_000)]
    records = baseline(tmp_path) + [write_repetition(tmp_path, "faulted", i, lines, CANARY) for i in range(2)]
    size = records[-1].events_path.stat().st_size
    tracemalloc.start()
    res = score(plan(), records, workers=1)  # in this process, where tracemalloc sees it
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert res.verdict == "scored"
    assert size > 10e6 and peak < 5e6, (size, peak)  # the events are never all held at once


def test_worker_processes_score_exactly_as_one_process(tmp_path):
    cost_probe = "  - { id: cost_multiplier_below, weight: 2, value: 3 }\n"
    text = PLAN.format(extra="").replace(
        cost_probe, cost_probe + "  - { id: judge, criterion: c, endpoint: 'http://127.0.0.1:9/v1', model: g }\n")
    records = baseline(tmp_path) + [faulted(tmp_path, i, surfaced=i % 2 == 0) for i in range(3)]
    results = [score(parse_plan_text(text), records, judge=lambda p, out: JudgeVerdict(len(out) / 100, "graded"),
                     workers=workers).to_json() for workers in (2, 1)]
    assert results[0] == results[1]
    assert [r["probes"][2]["passed"] for r in results[0]["repetitions"]] == [True] * 6  # cost_multiplier_below


def test_run_dir_round_trip_is_relocatable(tmp_path):
    run = tmp_path / "run"
    records = baseline(run) + [faulted(run, i) for i in range(3)]
    save_run(run, "plans/t.yaml", PLAN.format(extra=""), records)
    stored = json.loads((run / "run.json").read_text())
    assert stored["records"][0]["artifacts"] == "baseline-1"
    moved = tmp_path / "elsewhere"
    run.rename(moved)
    saved = load_run(moved)
    assert saved.plan.name == "t" and saved.plan_path == "plans/t.yaml"
    assert saved.records[0].events_path.exists()
    assert score(saved.plan, saved.records).to_json() == score(plan(), [
        r.__class__(**{**r.__dict__, "artifacts": moved / r.artifacts.name}) for r in records]).to_json()


def test_load_run_explains_a_wrong_directory(tmp_path):
    with pytest.raises(RunDirError, match="no such file"):
        load_run(tmp_path)
    (tmp_path / "run.json").write_text('{"format": "other"}')
    with pytest.raises(RunDirError, match="not a mitmchaos-run file"):
        load_run(tmp_path)


class _JudgeServer(BaseHTTPRequestHandler):
    seen: list = []  # noqa: RUF012 - the requests this server saw, read by the test

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _JudgeServer.seen.append((self.path, self.headers.get("Authorization"), body))
        answer = {"choices": [{"message": {"content": 'Verdict: {"score": 0.75, "reason": "mentions it"}'}}]}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_judge_calls_the_endpoint_directly_never_through_a_proxy(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _JudgeServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, "http://127.0.0.1:9")  # a dead proxy: using it would fail
        monkeypatch.setenv("MY_JUDGE_KEY", "sk-test")
        params = REGISTRY["judge"].params.model_validate(
            {"criterion": "reports the failure", "endpoint": f"http://127.0.0.1:{server.server_port}/v1",
             "model": "grader", "api_key_env": "MY_JUDGE_KEY"})
        verdict = ask_judge(params, "it failed")
    finally:
        server.shutdown()
    assert verdict == JudgeVerdict(0.75, "mentions it")
    path, auth, body = _JudgeServer.seen[-1]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test" and body["model"] == "grader"
    assert "reports the failure" in body["messages"][1]["content"]


def test_judge_unreachable_is_a_reason_not_an_error():
    params = REGISTRY["judge"].params.model_validate(
        {"criterion": "c", "endpoint": "http://127.0.0.1:9/v1", "model": "g"})
    verdict = ask_judge(params, "x")
    assert verdict.score is None and "127.0.0.1:9" in verdict.reason


@pytest.mark.parametrize("content, score", [('{"score": 1, "reason": "ok"}', 1.0), ("0.4", 0.4),
                                            ("no idea", None), ('{"score": 7}', 1.0)])
def test_parse_judgement(content, score):
    assert parse_judgement(content).score == score
