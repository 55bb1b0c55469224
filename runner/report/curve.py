"""The sweep report: the resilience curve, score and each probe's pass rate against the swept value.

Each probe is drawn with its Wilson interval as a band, the score as a heavy line, the
``break_below`` threshold as a dashed line and the breaking point (the first value scoring
below it) as a red vertical line, so a gradual decline and a cliff edge look different at a
glance. Written as JSON, a terminal table, Markdown and a self-contained HTML page.
"""

from __future__ import annotations

import json
import os
from html import escape
from pathlib import Path

from mitmchaos.catalog import text_table
from mitmchaos.report.comparison import (
    link,
    marks,
    outcome_text,
    rate_html,
    rate_text,
    score_text,
    short_rate,
    write_formats,
)
from mitmchaos.report.html import COLOURS, CSS, WIDTH, _legend, _pct, _short
from mitmchaos.report.markdown import _cell
from mitmchaos.suite import cell
from mitmchaos.sweep import SweepPoint, SweepResult

PROBE_COLOURS = [
    COLOURS[k] for k in ("interval", "cost", "duration", "ok", "tool_error", "undecided", "tool_ok")
]
SCORE_COLOUR, BREAK_COLOUR = COLOURS["threshold"], COLOURS["FAIL"]
HEIGHT, LEFT, RIGHT, TOP, PLOT_H = 340, 56, 24, 24, 250
PROBE_NUDGE_PX = 3  # probe lines at the same rate are drawn this far apart, so none hides another


def _numeric(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def x_positions(values: list) -> list[float]:
    """Where each value sits on the x axis, 0..1: to scale for numbers, evenly spaced otherwise."""
    if _numeric(values) and max(values) > min(values):
        low, high = min(values), max(values)
        return [(v - low) / (high - low) for v in values]
    return [i / (len(values) - 1) for i in range(len(values))] if len(values) > 1 else [0.5]


def summary_lines(result: SweepResult) -> list[str]:
    """The breaking point and the curve's shape, in words."""
    broken = result.breaking_point()
    lines = [
        f"breaking point: {result.parameter} = {broken.value} "
        f"(score {broken.score:.1f} < {result.break_below:g})"
        if broken
        else f"breaking point: none (no value scored below {result.break_below:g})"
    ]
    drop = result.steepest_drop()
    shape = result.shape()
    if drop:
        a, b, points = drop
        shape += (
            f": the steepest step loses {points:.1f} points, from {a.value} ({a.score:.1f}) to {b.value} "
            f"({b.score:.1f})"
        )
    return lines + [f"shape: {shape}"]


def curve_svg(result: SweepResult) -> str:
    points = result.points
    plot_w = WIDTH - LEFT - RIGHT
    xs = [LEFT + plot_w * p for p in x_positions([p.value for p in points])]

    def y(rate: float) -> float:
        return TOP + PLOT_H * (1 - _pct(rate))

    parts = [
        f'<svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="resilience curve: score and pass rates against {escape(result.parameter)}">'
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f'<line x1="{LEFT}" y1="{y(tick):.1f}" x2="{LEFT + plot_w}" y2="{y(tick):.1f}" '
            f'stroke="{COLOURS["grid"]}"/><text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" '
            f'text-anchor="end">{tick:.0%}</text>'
        )
    for x, point in zip(xs, points):
        parts.append(
            f'<text x="{x:.1f}" y="{TOP + PLOT_H + 18}" text-anchor="middle">'
            f"{escape(_short(str(point.value), 12))}</text>"
        )
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle" '
        f'fill="{COLOURS["muted"]}">{escape(result.fault)} {escape(result.parameter)}</text>'
    )
    count = len(points[0].run.result.probes) if points else 0
    for index in range(count):
        nudge = (index - (count - 1) / 2) * PROBE_NUDGE_PX
        parts += _probe_series(points, xs, index, PROBE_COLOURS[index % len(PROBE_COLOURS)], y, nudge)
    limit = y(result.break_below / 100)
    parts.append(
        f'<line x1="{LEFT}" y1="{limit:.1f}" x2="{LEFT + plot_w}" y2="{limit:.1f}" stroke="{BREAK_COLOUR}" '
        f'stroke-dasharray="6 4"/>'
    )
    scored = [(x, p.score / 100) for x, p in zip(xs, points) if p.score is not None]
    parts += _line(scored, SCORE_COLOUR, 3, y, radius=5, label="score")
    broken = result.breaking_point()
    if broken is not None:
        bx = xs[points.index(broken)]
        parts.append(
            f'<line x1="{bx:.1f}" y1="{TOP}" x2="{bx:.1f}" y2="{TOP + PLOT_H}" stroke="{BREAK_COLOUR}" '
            f'stroke-width="2"/><text x="{bx + 6:.1f}" y="{TOP + 12}" fill="{BREAK_COLOUR}" '
            f'style="fill:{BREAK_COLOUR}">breaks at {escape(str(broken.value))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _probe_series(
    points: list[SweepPoint], xs: list[float], index: int, colour: str, y, nudge: float
) -> list[str]:
    evaluated = [
        (x, p.run.result.probes[index]) for x, p in zip(xs, points) if p.run.result.probes[index].faulted.runs
    ]
    if not evaluated:
        return []
    band = [f"{x:.1f},{y(p.faulted.ci_high):.1f}" for x, p in evaluated] + [
        f"{x:.1f},{y(p.faulted.ci_low):.1f}" for x, p in reversed(evaluated)
    ]
    label = evaluated[0][1].label
    return [
        f'<polygon points="{" ".join(band)}" fill="{colour}" fill-opacity="0.12" stroke="none"/>'
    ] + _line([(x, p.faulted.rate) for x, p in evaluated], colour, 1.5, lambda v: y(v) + nudge, 3, label)


def _line(
    points: list[tuple[float, float]], colour: str, width: float, y, radius: float, label: str
) -> list[str]:
    if not points:
        return []
    path = " ".join(f"{x:.1f},{y(v):.1f}" for x, v in points)
    return [f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="{width}"/>'] + [
        f'<circle cx="{x:.1f}" cy="{y(v):.1f}" r="{radius}" fill="{colour}"><title>{escape(label)}: '
        f"{v:.0%}</title></circle>"
        for x, v in points
    ]


# ---------------------------------------------------------------- formats


def _labels(result: SweepResult) -> list[str]:
    return [p.label for p in result.points[0].run.result.probes] if result.points else []


def sweep_json(result: SweepResult, out_json: Path) -> dict:
    broken = result.breaking_point()
    return {
        "format": "mitmchaos-sweep",
        "version": 1,
        "name": result.name,
        "description": result.description,
        "fault": result.fault,
        "parameter": result.parameter,
        "break_below": result.break_below,
        "breaking_value": broken.value if broken else None,
        "shape": result.shape(),
        "exit_code": result.exit_code,
        "probes": _labels(result),
        "points": [
            {
                "value": p.value,
                "plan": p.run.experiment.name,
                "report": link(p.run, out_json, ".json"),
                "verdict": p.run.result.verdict,
                "outcome": p.run.result.outcome,
                "score": p.score,
                "probes": [
                    {"status": o.status, "faulted": vars(o.faulted), "baseline": vars(o.baseline)}
                    for o in p.run.result.probes
                ],
            }
            for p in result.points
        ],
    }


def render_sweep_text(result: SweepResult) -> str:
    labels = _labels(result)
    header = (result.parameter.upper(), "SCORE", "VERDICT", *(f"P{i + 1}" for i in range(len(labels))))
    rows = [
        (
            str(p.value),
            score_text(p.run.result),
            outcome_text(p.run.result),
            *(f"{marks(cell(o))} {short_rate(o.faulted)}".strip() for o in p.run.result.probes),
        )
        for p in result.points
    ]
    return "\n".join(
        [
            f"sweep      : {result.name}: {result.fault} {result.parameter} (exit {result.exit_code})",
            text_table(rows, header, {}),
            *(f"  P{i + 1} = {label}" for i, label in enumerate(labels)),
            *summary_lines(result),
        ]
    )


def render_sweep_markdown(result: SweepResult, out_json: Path) -> str:
    labels = _labels(result)
    lines = [f"## mitmchaos sweep: {result.name} — exit {result.exit_code}", ""]
    if result.description:
        lines += [_cell(result.description), ""]
    lines += [f"- {line}" for line in summary_lines(result)] + [""]
    lines += [
        f"| `{result.parameter}` | Score | Verdict | " + " | ".join(f"`{_cell(x)}`" for x in labels) + " |",
        "|---|---|---|" + "---|" * len(labels),
    ]
    for p in result.points:
        lines.append(
            f"| [{_cell(p.value)}]({link(p.run, out_json, '.md')}) | {score_text(p.run.result)} | "
            f"{outcome_text(p.run.result)} | "
            + " | ".join(f"{marks(cell(o))} {rate_text(o.faulted)}".strip() for o in p.run.result.probes)
            + " |"
        )
    return "\n".join(lines) + "\n"


def render_sweep_html(result: SweepResult, page: Path) -> str:
    labels = _labels(result)
    out = [
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>mitmchaos sweep: '
        f"{escape(result.name)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(result.name)}</h1><p>sweep of <code>{escape(result.fault)}</code> "
        f"<code>{escape(result.parameter)}</code>, exit {result.exit_code}</p>",
    ]
    if result.description:
        out.append(f'<p class="muted">{escape(result.description)}</p>')
    out.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in summary_lines(result)) + "</ul>")
    out.append("<h2>Resilience curve</h2>")
    out.append(
        "<p>"
        + _legend(
            [("score", SCORE_COLOUR), (f"break below {result.break_below:g}", BREAK_COLOUR)]
            + [(label, PROBE_COLOURS[i % len(PROBE_COLOURS)]) for i, label in enumerate(labels)]
        )
        + '</p><p class="muted">Probe lines are faulted pass rates; their bands are the Wilson intervals.</p>'
    )
    out.append(curve_svg(result))
    out.append(
        "<h2>Per value</h2><table><tr><th>"
        + escape(result.parameter)
        + "</th><th>Score</th><th>Verdict</th>"
        + "".join(f"<th><code>{escape(label)}</code></th>" for label in labels)
        + "</tr>"
    )
    for p in result.points:
        out.append(
            f'<tr><td><a href="{escape(link(p.run, page, ".html"))}">{escape(str(p.value))}</a></td>'
            f"<td>{score_text(p.run.result)}</td><td>{escape(outcome_text(p.run.result))}</td>"
            + "".join(f"<td>{rate_html(o.faulted, marks(cell(o)))}</td>" for o in p.run.result.probes)
            + "</tr>"
        )
    out.append("</table></body></html>")
    return "\n".join(out) + "\n"


def write_sweep_reports(result: SweepResult, out_json: str | os.PathLike) -> dict[str, Path]:
    return write_formats(
        out_json,
        lambda paths: {
            "json": json.dumps(sweep_json(result, paths["json"]), indent=2, default=str) + "\n",
            "text": render_sweep_text(result) + "\n",
            "markdown": render_sweep_markdown(result, paths["markdown"]),
            "html": render_sweep_html(result, paths["html"]),
        },
    )
