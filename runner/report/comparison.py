"""The suite report: one table per task, rows fault sets, columns probes, against the shared baseline.

A cell is the probe's faulted pass rate with its interval, marked ✗ when the probe fails its
threshold under that fault set and ▼ when its rate is below the shared baseline's, so the
faults a task cannot survive (its single points of failure) stand out at a glance. Written as
JSON, a terminal table, Markdown and a self-contained HTML page linking each experiment's
own report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from html import escape
from pathlib import Path

from mitmchaos.catalog import text_table
from mitmchaos.report import report_paths
from mitmchaos.report.html import CSS, _legend
from mitmchaos.report.markdown import _cell, _interval, _phase
from mitmchaos.report.text import OUTCOME_WORDS
from mitmchaos.scoring import PhaseStats, RunResult
from mitmchaos.suite import Cell, ScoredExperiment, SuiteResult, TaskComparison, compare

BELOW_THRESHOLD, BELOW_BASELINE = "✗", "▼"
TINTS = {"below_threshold": "#fee2e2", "below_baseline": "#fef3c7", "held": "#dcfce7", "n/a": "#ffffff"}
FAULT_SET_ON_ONE_LINE = ".compare td:first-child{white-space:nowrap}"
LEGEND = (
    f"{BELOW_THRESHOLD} below the probe's threshold under this fault · {BELOW_BASELINE} below the shared "
    "baseline's pass rate"
)


def marks(cell: Cell) -> str:
    return (BELOW_THRESHOLD if cell.below_threshold else "") + (BELOW_BASELINE if cell.below_baseline else "")


def rate_text(phase: PhaseStats) -> str:
    """``1/3 (33%) 6%–79%``, or ``not evaluated``."""
    return f"{_phase(phase)} {_interval(phase)}" if phase.runs else _phase(phase)


def rate_html(phase: PhaseStats, mark: str = "") -> str:
    """The rate, and the interval on a line of its own, so a table of many probes still fits."""
    interval = f'<br><span class="muted">{_interval(phase)}</span>' if phase.runs else ""
    return f"<b>{mark}</b> {escape(_phase(phase))}{interval}"


def outcome_text(result: RunResult) -> str:
    return OUTCOME_WORDS[result.outcome] if result.outcome else result.verdict


def score_text(result: RunResult) -> str:
    return f"{result.score:.1f}" if result.score is not None else "—"


def tint(cell: Cell) -> str:
    if not cell.probe.faulted.runs:
        return TINTS["n/a"]
    return TINTS[
        "below_threshold" if cell.below_threshold else "below_baseline" if cell.below_baseline else "held"
    ]


def link(run: ScoredExperiment, page: Path, suffix: str) -> str:
    """The experiment's report, relative to the page that links it."""
    return Path(os.path.relpath(run.report.with_suffix(suffix), page.parent)).as_posix()


# ---------------------------------------------------------------- formats


def suite_json(result: SuiteResult, out_json: Path) -> dict:
    return {
        "format": "mitmchaos-suite",
        "version": 1,
        "name": result.name,
        "description": result.description,
        "exit_code": result.exit_code,
        "tasks": [
            {
                "task": table.task,
                "probes": table.probes,
                "baseline": [vars(p.baseline) for p in table.baseline],
                "rows": [
                    {
                        "fault_set": row.run.experiment.label,
                        "plan": row.run.experiment.name,
                        "report": link(row.run, out_json, ".json"),
                        "verdict": row.run.result.verdict,
                        "outcome": row.run.result.outcome,
                        "score": row.run.result.score,
                        "cells": [
                            {
                                "status": c.probe.status,
                                "faulted": vars(c.probe.faulted),
                                "below_threshold": c.below_threshold,
                                "below_baseline": c.below_baseline,
                            }
                            for c in row.cells
                        ],
                    }
                    for row in table.rows
                ],
            }
            for table in compare(result.runs)
        ],
    }


def render_suite_text(result: SuiteResult) -> str:
    lines = [f"suite      : {result.name} (exit {result.exit_code})"]
    for table in compare(result.runs):
        header = ("FAULT SET", "SCORE", "VERDICT", *(f"P{i + 1}" for i in range(len(table.probes))))
        rows = [("baseline (shared)", "", "", *(short_rate(p.baseline) for p in table.baseline))]
        rows += [
            (
                row.run.experiment.label,
                score_text(row.run.result),
                outcome_text(row.run.result),
                *(f"{marks(c)} {short_rate(c.probe.faulted)}".strip() for c in row.cells),
            )
            for row in table.rows
        ]
        lines += ["", f"task {table.task}", text_table(rows, header, {})]
        lines += [f"  P{i + 1} = {label}" for i, label in enumerate(table.probes)]
    lines += ["", LEGEND]
    return "\n".join(lines)


def short_rate(phase: PhaseStats) -> str:
    return f"{phase.passes}/{phase.runs}" if phase.runs else "n/a"


def render_suite_markdown(result: SuiteResult, out_json: Path) -> str:
    lines = [f"## mitmchaos suite: {result.name} — exit {result.exit_code}", ""]
    if result.description:
        lines += [_cell(result.description), ""]
    for table in compare(result.runs):
        lines += [
            f"### Task `{table.task}`",
            "",
            "| Fault set | Score | Verdict | " + " | ".join(f"`{_cell(p)}`" for p in table.probes) + " |",
            "|---|---|---|" + "---|" * len(table.probes),
            "| *baseline (shared)* | | | " + " | ".join(rate_text(p.baseline) for p in table.baseline) + " |",
        ]
        for row in table.rows:
            lines.append(
                f"| [{_cell(row.run.experiment.label)}]({link(row.run, out_json, '.md')}) | "
                f"{score_text(row.run.result)} | {outcome_text(row.run.result)} | "
                + " | ".join(f"{marks(c)} {rate_text(c.probe.faulted)}".strip() for c in row.cells)
                + " |"
            )
        lines.append("")
    lines.append(LEGEND)
    return "\n".join(lines) + "\n"


def _table_html(table: TaskComparison, page: Path) -> str:
    head = "".join(f"<th><code>{escape(label)}</code></th>" for label in table.probes)
    rows = [
        f'<table class="compare"><tr><th>Fault set</th><th>Score</th><th>Verdict</th>{head}</tr>',
        "<tr><td><i>baseline (shared)</i></td><td></td><td></td>"
        + "".join(f"<td>{rate_html(p.baseline)}</td>" for p in table.baseline)
        + "</tr>",
    ]
    for row in table.rows:
        result = row.run.result
        cells = "".join(
            f'<td style="background:{tint(c)}" title="{escape(c.probe.label)}: {escape(c.probe.status)}">'
            f"{rate_html(c.probe.faulted, marks(c))}</td>"
            for c in row.cells
        )
        rows.append(
            f'<tr><td><a href="{escape(link(row.run, page, ".html"))}">{escape(row.run.experiment.label)}</a>'
            f"</td><td>{score_text(result)}</td><td>{escape(outcome_text(result))}</td>{cells}</tr>"
        )
    return "".join(rows) + "</table>"


def render_suite_html(result: SuiteResult, page: Path) -> str:
    out = [
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>mitmchaos suite: '
        f"{escape(result.name)}</title><style>{CSS}{FAULT_SET_ON_ONE_LINE}</style></head><body>",
        f"<h1>{escape(result.name)}</h1><p>suite, exit {result.exit_code}</p>",
    ]
    if result.description:
        out.append(f'<p class="muted">{escape(result.description)}</p>')
    out.append(
        "<p>"
        + _legend(
            [
                ("held", TINTS["held"]),
                ("below the shared baseline", TINTS["below_baseline"]),
                ("below the threshold", TINTS["below_threshold"]),
            ]
        )
        + f'</p><p class="muted">{escape(LEGEND)}</p>'
    )
    out.append(
        f'<p class="muted">Cells: the faulted repetitions\' pass rate with its {_confidence(result)} Wilson '
        "interval. Each fault set links its own report, with plots and timelines.</p>"
    )
    for table in compare(result.runs):
        out.append(f"<h2>Task {escape(table.task)}: which fault hurts which probe</h2>")
        out.append(_table_html(table, page))
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _confidence(result: SuiteResult) -> str:
    levels = sorted({r.result.confidence for r in result.runs})
    return ", ".join(f"{c * 100:g}%" for c in levels)


def write_formats(
    out_json: str | os.PathLike, render: Callable[[dict[str, Path]], dict[str, str]]
) -> dict[str, Path]:
    """Write the JSON, text, Markdown and HTML that ``render(paths)`` returns by format; returns the paths."""
    paths = {k: v for k, v in report_paths(out_json).items() if k != "junit"}
    paths["json"].parent.mkdir(parents=True, exist_ok=True)
    for name, text in render(paths).items():
        paths[name].write_text(text, encoding="utf-8")
    return paths


def write_suite_reports(result: SuiteResult, out_json: str | os.PathLike) -> dict[str, Path]:
    return write_formats(
        out_json,
        lambda paths: {
            "json": json.dumps(suite_json(result, paths["json"]), indent=2) + "\n",
            "text": render_suite_text(result) + "\n",
            "markdown": render_suite_markdown(result, paths["markdown"]),
            "html": render_suite_html(result, paths["html"]),
        },
    )
