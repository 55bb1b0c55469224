"""A self-contained HTML report: inline SVG plots and CSS, no script, nothing fetched at view time.

Three plots a person would rather look at than read: every probe's pass rate with its
interval against the threshold, cost and duration per repetition, and a timeline per
repetition of model calls, tool calls and injected faults.
"""

from __future__ import annotations

from html import escape

from mitmchaos import stats
from mitmchaos.report.text import threshold_text, verdict_text
from mitmchaos.scoring import PhaseStats, ProbeOutcome, RepetitionResult, RunResult

# Opaque colours, so a screenshot test can find each kind of mark by its exact pixel colour.
COLOURS = {
    "interval": "#3b82f6", "baseline": "#94a3b8", "threshold": "#111827", "ok": "#16a34a", "FAIL": "#dc2626",
    "undecided": "#d97706", "n/a": "#9ca3af", "cost": "#f97316", "duration": "#8b5cf6", "call_ok": "#22c55e",
    "call_failed": "#ef4444", "tool_ok": "#0ea5e9", "tool_error": "#a21caf", "tool_unknown": "#6b7280",
    "fault": "#b91c1c", "grid": "#e5e7eb", "text": "#111827", "muted": "#6b7280",
}
WIDTH = 900

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:940px;color:#111827}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e5e7eb}
.verdict{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600}
.scored{background:#16a34a}.weakness_found{background:#dc2626}.aborted{background:#d97706}
.invalid,.inconclusive{background:#6b7280}
table{border-collapse:collapse;width:100%;font-size:13px} td,th{border-bottom:1px solid #e5e7eb;padding:4px 6px;
text-align:left;vertical-align:top} code{font-size:12px} .warn{color:#92400e} .muted{color:#6b7280}
svg text{font:12px system-ui,sans-serif;fill:#111827}
"""


def _pct(x: float) -> float:
    return max(0.0, min(1.0, x))


def _pass_rate_plot(probes: list[ProbeOutcome], confidence: float) -> str:
    left, right, row = 300, 120, 34
    plot = WIDTH - left - right
    height = 30 + row * len(probes)

    def x(v: float) -> float:
        return left + plot * _pct(v)

    parts = [f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-label="pass rates with {confidence * 100:g}% intervals">']
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{x(tick):.1f}" y1="18" x2="{x(tick):.1f}" y2="{height}" stroke="{COLOURS["grid"]}"/>'
                     f'<text x="{x(tick):.1f}" y="12" text-anchor="middle">{tick:.0%}</text>')
    for n, p in enumerate(probes):
        y = 30 + row * n
        parts.append(f'<text x="{left - 8}" y="{y + 14}" text-anchor="end">{escape(_short(p.label, 42))}</text>')
        parts += _interval_bar(p.faulted, y + 4, 12, COLOURS["interval"], COLOURS[p.status], x)
        parts += _interval_bar(p.baseline, y + 20, 5, COLOURS["baseline"], COLOURS["baseline"], x)
        parts.append(f'<line x1="{x(p.threshold):.1f}" y1="{y}" x2="{x(p.threshold):.1f}" y2="{y + 28}" '
                     f'stroke="{COLOURS["threshold"]}" stroke-width="2"/>')
        figures = f"{p.faulted.passes}/{p.faulted.runs}" if p.faulted.runs else "n/a"
        parts.append(f'<text x="{left + plot + 10}" y="{y + 14}" fill="{COLOURS[p.status]}" '
                     f'style="fill:{COLOURS[p.status]}">{escape(p.status)} {figures}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _interval_bar(phase: PhaseStats, y: float, h: float, bar: str, dot: str, x) -> list[str]:
    if not phase.runs:
        return []
    x0, x1 = x(phase.ci_low), x(phase.ci_high)
    return [f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(2.0, x1 - x0):.1f}" height="{h}" rx="2" fill="{bar}"/>',
            f'<circle cx="{x(phase.rate):.1f}" cy="{y + h / 2:.1f}" r="{h / 2 + 2:.1f}" fill="{dot}" '
            f'stroke="#fff" stroke-width="1.5"/>']


def _bars(reps: list[RepetitionResult], values: list[float], colour: str, unit: str, title: str) -> str:
    width, height, left, bottom = WIDTH // 2 - 10, 190, 52, 36
    plot_w, plot_h = width - left - 10, height - bottom - 24
    top = max(values + [0.0]) or 1.0
    step = plot_w / max(1, len(values))
    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{escape(title)}"><text x="{left}" y="14" font-weight="600">{escape(title)}</text>']
    for frac in (0, 0.5, 1):
        y = 24 + plot_h * (1 - frac)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - 10}" y2="{y:.1f}" stroke="{COLOURS["grid"]}"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(top * frac, unit)}</text>')
    for i, (rep, value) in enumerate(zip(reps, values)):
        h = plot_h * value / top
        bx = left + i * step + step * 0.15
        fill = colour if rep.phase == "faulted" else COLOURS["baseline"]
        parts.append(f'<rect x="{bx:.1f}" y="{24 + plot_h - h:.1f}" width="{step * 0.7:.1f}" height="{max(h, 1):.1f}" '
                     f'fill="{fill}"><title>{rep.phase} {rep.index + 1}: {_fmt(value, unit)}</title></rect>'
                     f'<text x="{bx + step * 0.35:.1f}" y="{height - bottom + 16}" text-anchor="middle">'
                     f'{"B" if rep.phase == "baseline" else "F"}{rep.index + 1}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _fmt(value: float, unit: str) -> str:
    return f"${value:.3f}" if unit == "$" else f"{value:.0f}s" if value >= 10 else f"{value:.1f}s"


def _timeline(rep: RepetitionResult) -> str:
    t = rep.timeline
    left, height = 90, 86
    plot = WIDTH - left - 20
    span = t["span_s"] or 1.0

    def x(seconds: float) -> float:
        return left + plot * _pct(seconds / span)

    lanes = {"faults": 16, "model": 40, "tools": 66}
    parts = [f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-label="timeline of {rep.phase} repetition {rep.index + 1}">']
    for name, y in lanes.items():
        parts.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end" fill="{COLOURS["muted"]}">{name}</text>'
                     f'<line x1="{left}" y1="{y}" x2="{left + plot}" y2="{y}" stroke="{COLOURS["grid"]}"/>')
    for call in t["llm"]:
        x0, x1 = x(call["start"]), x(call["end"])
        colour = COLOURS["call_failed"] if call["failed"] else COLOURS["call_ok"]
        parts.append(f'<rect x="{x0:.1f}" y="{lanes["model"] - 8}" width="{max(3.0, x1 - x0):.1f}" height="16" '
                     f'fill="{colour}"><title>model call {call["status"]} at {call["start"]:.1f}s'
                     f'{" (" + escape(call["faulted"]) + ")" if call["faulted"] else ""}</title></rect>')
    for tool in t["tools"]:
        colour = {True: COLOURS["tool_ok"], False: COLOURS["tool_error"]}.get(tool["ok"], COLOURS["tool_unknown"])
        parts.append(f'<circle cx="{x(tool["t"]):.1f}" cy="{lanes["tools"]}" r="6" fill="{colour}">'
                     f'<title>{escape(tool["tool"])} at {tool["t"]:.1f}s: '
                     f'{ {True: "ok", False: "error"}.get(tool["ok"], "no result")}</title></circle>')
    for fault in t["faults"]:
        fx, y = x(fault["t"]), lanes["faults"]
        parts.append(f'<path d="M{fx - 7:.1f},{y - 7} L{fx + 7:.1f},{y - 7} L{fx:.1f},{y + 7} Z" '
                     f'fill="{COLOURS["fault"]}"><title>{escape(fault["fault"])} on {escape(fault["target"])} '
                     f'at {fault["t"]:.1f}s</title></path>')
    parts.append(f'<text x="{left + plot}" y="{height - 2}" text-anchor="end" fill="{COLOURS["muted"]}">'
                 f'{span:.1f}s</text></svg>')
    return "".join(parts)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _legend(items: list[tuple[str, str]]) -> str:
    return " ".join(f'<span style="display:inline-block;width:10px;height:10px;background:{c};margin:0 4px 0 12px">'
                    f'</span>{escape(label)}' for label, c in items)


def render_html(result: RunResult) -> str:
    plan = result.plan
    status_class = result.outcome if result.verdict == "scored" and result.outcome else result.verdict
    score = f"{result.score:.1f} / 100" if result.score is not None else "no score"
    out = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
           f"<title>mitmchaos: {escape(plan['name'])}</title><style>{CSS}</style></head><body>",
           f"<h1>{escape(plan['name'])}</h1>",
           f'<p><span class="verdict {status_class}">{escape(verdict_text(result))}</span> '
           f"&nbsp; score <b>{score}</b></p>"]
    if plan.get("description"):
        out.append(f'<p class="muted">{escape(plan["description"])}</p>')
    if result.reasons:
        out.append("<ul>" + "".join(f"<li>{escape(r)}</li>" for r in result.reasons) + "</ul>")
    if result.warnings:
        out.append("<ul>" + "".join(f'<li class="warn">⚠ {escape(w)}</li>' for w in result.warnings) + "</ul>")
    out.append(f"<h2>Pass rates ({result.confidence * 100:g}% Wilson intervals)</h2>")
    out.append("<p>" + _legend([("faulted interval", COLOURS["interval"]), ("baseline", COLOURS["baseline"]),
                                ("threshold", COLOURS["threshold"])]) + "</p>")
    out.append(_pass_rate_plot(result.probes, result.confidence))
    out.append(_probe_table(result))
    reps = result.repetitions
    out.append("<h2>Cost and duration per repetition</h2>")
    out.append("<p>" + _legend([("baseline", COLOURS["baseline"]), ("faulted cost", COLOURS["cost"]),
                                ("faulted duration", COLOURS["duration"])]) + "</p>")
    out.append("<div>" + _bars(reps, [r.cost_usd for r in reps], COLOURS["cost"], "$", "cost (USD)")
               + _bars(reps, [r.duration_s for r in reps], COLOURS["duration"], "s", "agent duration") + "</div>")
    out.append("<h2>Timelines</h2>")
    out.append("<p>" + _legend([("injected fault", COLOURS["fault"]), ("model call", COLOURS["call_ok"]),
                                ("failed model call", COLOURS["call_failed"]), ("tool ok", COLOURS["tool_ok"]),
                                ("tool error", COLOURS["tool_error"])]) + "</p>")
    for rep in reps:
        stopped = (rep.abort or {}).get("condition") or rep.error
        extra = f", stopped: {stopped}" if stopped else ""
        hidden = rep.timeline.get("not_drawn")
        out.append(f"<h3>{rep.phase} {rep.index + 1} <span class=\"muted\">{escape(rep.run_id)} · agent exit "
                   f"{rep.agent_exit} · verify exit {rep.verify_exit} · {rep.llm_calls} model calls · "
                   f"{rep.tool_calls} tool calls · {rep.faults_injected} faults{escape(extra)}"
                   f"{f' · {hidden} marks not drawn' if hidden else ''}</span></h3>")
        out.append(_timeline(rep))
    out.append(f'<p class="muted">report schema {result.schema_version}</p></body></html>')
    return "\n".join(out) + "\n"


def _probe_table(result: RunResult) -> str:
    rows = ["<table><tr><th>Probe</th><th>Status</th><th>Faulted</th><th>Baseline</th><th>Needs</th>"
            "<th>Weight</th></tr>"]
    for p in result.probes:
        f, b = p.faulted, p.baseline
        rows.append(f"<tr><td><code>{escape(p.label)}</code></td>"
                    f'<td style="color:{COLOURS[p.status]}">{escape(p.status)}</td>'
                    f"<td>{stats.interval_text(f.passes, f.runs, result.confidence)}</td>"
                    f"<td>{stats.interval_text(b.passes, b.runs, result.confidence)}</td>"
                    f"<td>≥ {threshold_text(p.threshold)}</td><td>{p.weight:g}</td></tr>")
    return "".join(rows) + "</table>"
