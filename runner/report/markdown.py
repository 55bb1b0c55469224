"""Markdown for a CI job summary (e.g. appended to $GITHUB_STEP_SUMMARY)."""

from __future__ import annotations

from mitmchaos import stats
from mitmchaos.report.text import threshold_text, verdict_text
from mitmchaos.scoring import PhaseStats, RunResult

STATUS_MARK = {"ok": "✅ ok", "FAIL": "❌ FAIL", "undecided": "❔ undecided", "n/a": "➖ n/a"}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _phase(p: PhaseStats) -> str:
    if not p.runs:
        return "not evaluated"
    return f"{p.passes}/{p.runs} ({stats.percent_floor(p.rate)}%)"


def _interval(p: PhaseStats) -> str:
    return f"{stats.percent_floor(p.ci_low)}%–{stats.percent_ceil(p.ci_high)}%" if p.runs else "—"


def render_markdown(result: RunResult) -> str:
    plan = result.plan
    conf = f"{result.confidence * 100:g}%"
    score = f"{result.score:.1f} / 100" if result.score is not None else "none"
    lines = [f"## mitmchaos: {plan['name']} — {verdict_text(result)}", "",
             f"**Score:** {score}", ""]
    if plan.get("description"):
        lines += [_cell(plan["description"]), ""]
    lines += [f"| Probe | Status | Faulted | {conf} CI | Needs | Baseline | Weight |",
              "|---|---|---|---|---|---|---|"]
    for p in result.probes:
        status = STATUS_MARK[p.status] + (f" (≈{p.settle_runs} runs)" if p.settle_runs else "")
        lines.append(f"| `{_cell(p.label)}` | {status} | {_phase(p.faulted)} | {_interval(p.faulted)} | "
                     f"≥ {threshold_text(p.threshold)} | {_phase(p.baseline)} | {p.weight:g} |")
    for title, items in (("Reasons", result.reasons), ("Warnings", result.warnings)):
        if items:
            lines += ["", f"### {title}", ""] + [f"- {_cell(i)}" for i in items]
    lines += ["", "### Repetitions", "", "| Phase | # | Run id | Agent exit | Verify exit | Duration | Cost | "
              "Model calls | Tool calls | Faults | Stopped |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result.repetitions:
        stopped = (r.abort or {}).get("condition") or r.error or ""
        lines.append(f"| {r.phase} | {r.index + 1} | `{r.run_id}` | {r.agent_exit} | {r.verify_exit} | "
                     f"{r.duration_s:.1f}s | ${r.cost_usd:.4f} | {r.llm_calls} | {r.tool_calls} | "
                     f"{r.faults_injected} | {_cell(stopped)} |")
    return "\n".join(lines) + "\n"
