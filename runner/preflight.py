"""``mitmchaos plan FILE``: what a plan's repetitions can show, before any money is spent.

For every threshold the plan uses: how many all-pass runs it takes for the Wilson lower
bound to reach it, and what the interval looks like after the plan's repetitions when all
pass and when one fails, so nobody runs 40 repetitions to learn they needed 73.
"""

from __future__ import annotations

from mitmchaos import stats
from mitmchaos.plan import Plan
from mitmchaos.report.text import threshold_text
from mitmchaos.scoring import probe_label

MAX_REPEAT = next(m.le for m in Plan.model_fields["repeat"].metadata if getattr(m, "le", None) is not None)


def preview(plan: Plan) -> tuple[list[str], list[str]]:
    """(lines, warnings) describing what the plan's repetitions can and cannot show."""
    n, conf = plan.repeat, plan.confidence
    ceiling = plan.abort_value("cost_usd_above")
    lines = [f"plan       : {plan.name}: {n} baseline + {n} faulted repetitions, {conf * 100:g}% intervals"
             + (", require_confidence" if plan.require_confidence else "")]
    if ceiling is not None:
        lines.append(f"spend      : at most ${2 * n * ceiling:g} ({2 * n} repetitions x the ${ceiling:g} cost ceiling)")
    warnings = []
    by_threshold: dict[float, list[str]] = {}
    for probe in plan.probes:
        by_threshold.setdefault(plan.threshold(probe), []).append(probe_label(probe))
    for t, labels in sorted(by_threshold.items(), reverse=True):
        shape = (f"all pass -> {stats.interval_text(n, n, conf)}"
                 + (f", one failure -> {stats.interval_text(n - 1, n, conf)}" if n > 1 else ""))
        head = f"threshold  : {threshold_text(t)} ({', '.join(labels)}): "
        if t >= 1.0:
            lines.append(head + f"decided exactly, one failure is a weakness; {shape}")
        elif t <= 0.0:
            lines.append(head + "always met (the probe is reported, never failed)")
        else:
            need = stats.runs_needed(t, conf)
            lines.append(head + f"needs {need} all-pass runs to show; {shape}")
            if need > n:
                consequence = ("every run of it will be inconclusive (require_confidence)" if plan.require_confidence
                               else "a pass there is a point estimate, not evidence")
                warnings.append(f"repeat {n} cannot show {threshold_text(t)} for {', '.join(labels)}: it takes "
                                f"{need} all-pass faulted repetitions"
                                + (f" (repeat is at most {MAX_REPEAT})" if need > MAX_REPEAT else "") + f"; {consequence}")
    return lines, warnings
