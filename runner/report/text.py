"""The terminal summary: one line per probe, as the statistics seed prints them."""

from __future__ import annotations

from mitmchaos import stats
from mitmchaos.scoring import ProbeOutcome, RunResult

OUTCOME_WORDS = {"weakness_found": "weakness found", "hypothesis_held": "hypothesis held"}


def threshold_text(t: float) -> str:
    return f"{t * 100:g}%"


def probe_line(probe: ProbeOutcome, confidence: float, status_width: int = 4) -> str:
    """``probe      : FAIL output_matches('^Summary:'): 29/40 (72%, 95% CI 57%-84%) needs >= 95%``"""
    f = probe.faulted
    figures = (stats.interval_text(f.passes, f.runs, confidence) if f.runs
               else f"not evaluated in {f.not_evaluated} faulted repetition(s)")
    line = f"probe      : {probe.status:<{status_width}} {probe.label}: {figures} needs >= {threshold_text(probe.threshold)}"
    if probe.id == "task_success" and f.runs:
        line += f"; pass^{f.runs}: {'every repetition passed' if probe.pass_all else 'not every repetition passed'}"
    if probe.status == "undecided":
        line += f"; about {probe.settle_runs} runs would settle it" if probe.settle_runs else "; sits on the threshold"
    return line


def verdict_text(result: RunResult) -> str:
    text = f"{result.verdict} (exit {result.exit_code})"
    return text + (f": {OUTCOME_WORDS[result.outcome]}" if result.outcome else "")


def render_summary(result: RunResult) -> str:
    plan = result.plan
    phases = [r.phase for r in result.repetitions]
    width = max([4] + [len(p.status) for p in result.probes])
    lines = [f"experiment : {plan['name']} ({phases.count('baseline')} baseline + {phases.count('faulted')} faulted "
             f"repetitions, seed {plan['seed']})"]
    lines += [probe_line(p, result.confidence, width) for p in result.probes]
    lines.append(f"score      : {result.score:.1f} / 100" if result.score is not None else "score      : none")
    lines.append(f"verdict    : {verdict_text(result)}")
    lines += [f"reason     : {r}" for r in result.reasons]
    lines += [f"warning    : {w}" for w in result.warnings]
    return "\n".join(lines)
