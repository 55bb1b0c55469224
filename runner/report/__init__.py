"""Reports of a scored run, all built from one ``RunResult``.

``write_reports(result, out_json)`` writes the JSON report (schema: docs/report.md) and,
next to it, the terminal summary (``.txt``), JUnit XML (``.junit.xml``), Markdown for a CI
job summary (``.md``) and a self-contained HTML report (``.html``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mitmchaos.report.html import render_html
from mitmchaos.report.junit import render_junit
from mitmchaos.report.markdown import render_markdown
from mitmchaos.report.text import render_summary
from mitmchaos.scoring import RunResult


def report_paths(out_json: str | os.PathLike) -> dict[str, Path]:
    out = Path(out_json)
    stem = out.with_suffix("")
    return {"json": out, "text": stem.with_suffix(".txt"), "junit": stem.with_suffix(".junit.xml"),
            "markdown": stem.with_suffix(".md"), "html": stem.with_suffix(".html")}


def write_reports(result: RunResult, out_json: str | os.PathLike) -> dict[str, Path]:
    """Write every format; returns the paths by format name."""
    paths = report_paths(out_json)
    paths["json"].parent.mkdir(parents=True, exist_ok=True)
    contents = {
        "json": json.dumps(result.to_json(), indent=2) + "\n",
        "text": render_summary(result) + "\n",
        "junit": render_junit(result),
        "markdown": render_markdown(result),
        "html": render_html(result),
    }
    for name, text in contents.items():
        paths[name].write_text(text, encoding="utf-8")
    return paths


def read_report(path: str | os.PathLike) -> RunResult:
    return RunResult.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
