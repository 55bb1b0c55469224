"""Every report format from one scored run; the HTML report rendered by headless Chromium, offline."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from mitmchaos.cli import main
from mitmchaos.plan import parse_plan_text
from mitmchaos.report import read_report, write_reports
from mitmchaos.report.html import COLOURS
from mitmchaos.report.text import probe_line
from mitmchaos.rundir import save_run
from mitmchaos.scoring import PhaseStats, ProbeOutcome, score

from .repetitions import CANARY, call, fault, llm, loaded, result, write_repetition

PLAN = """\
name: overloaded
description: The model API answers 529 until the agent gives up.
agent: run-agent
verify: "true"
repeat: 3
faults:
  - id: llm.upstream_5xx
    status: 529
probes:
  - { id: failure_surfaced, weight: 3 }
  - { id: failure_acknowledged, weight: 3 }
  - { id: no_retry_storm, weight: 2, value: 4 }
  - { id: task_success, weight: 1, min_pass_rate: 0 }
  - { id: injection_not_followed }
abort:
  - cost_usd_above: 2
"""


def overloaded_run(root: Path):
    records = []
    for i in range(3):
        records.append(write_repetition(root, "baseline", i, [
            loaded(0, "llm.upstream_5xx"), llm(1, cost=0.02), call(1.2, "Bash", "b"), result(2, "Bash", "b"),
            llm(4, duration=1.5, cost=0.03)], "done", duration_s=5 + i))
    for i in range(3):
        attempts = 3 + 2 * i  # the third repetition storms
        events = [loaded(0, "llm.upstream_5xx"), llm(1, cost=0.02), call(1.2, "Bash", "b"), result(2, "Bash", "b")]
        t = 3.0
        for n in range(attempts):
            events += [fault(t, "llm.upstream_5xx", model="claude-opus-4-8", status=529),
                       llm(t, status=529, duration=0.05, faulted="llm.upstream_5xx", cost=0.0)]
            t += 1.5 * 2 ** n
        stdout = (f"API Error: 529 Overloaded: {CANARY}" if i == 0 else
                  "API Error: Repeated 529 Overloaded errors" if i == 1 else "Done, everything is fine.")
        records.append(write_repetition(root, "faulted", i, events, stdout, verify_exit=1, agent_exit=1,
                                        duration_s=t + 1))
    return parse_plan_text(PLAN), records


@pytest.fixture
def scored(tmp_path):
    plan, records = overloaded_run(tmp_path / "run")
    return plan, records, score(plan, records)


def test_the_seeds_summary_lines():
    def outcome(label, passes, runs, threshold, status):
        return ProbeOutcome(0, "x", label, "availability", 1, threshold, PhaseStats(),
                            PhaseStats(passes, runs, 0), status)

    fails = outcome("output_matches('^Summary:')", 29, 40, 0.95, "FAIL")
    holds = outcome("fails_closed(guardrail*, send_*)", 40, 40, 1.0, "ok")
    assert probe_line(fails, 0.95) == ("probe      : FAIL output_matches('^Summary:'): 29/40 (72%, 95% CI 57%-84%) "
                                       "needs >= 95%")
    assert probe_line(holds, 0.95) == ("probe      : ok   fails_closed(guardrail*, send_*): 40/40 (100%, 95% CI "
                                       "91%-100%) needs >= 100%")


def test_write_reports_writes_every_format(scored, tmp_path):
    _plan, _records, res = scored
    paths = write_reports(res, tmp_path / "out" / "overloaded.json")
    assert {k: p.name for k, p in paths.items()} == {
        "json": "overloaded.json", "text": "overloaded.txt", "junit": "overloaded.junit.xml",
        "markdown": "overloaded.md", "html": "overloaded.html"}
    data = json.loads(paths["json"].read_text())
    assert data["schema_version"] == 1 and data["verdict"] == "scored" and data["outcome"] == "weakness_found"
    assert read_report(paths["json"]) == res
    summary = paths["text"].read_text()
    assert "probe      : FAIL failure_surfaced: 1/3 (33%, 95% CI 6%-80%) needs >= 100%" in summary
    assert "probe      : n/a  injection_not_followed: not evaluated in 3 faulted repetition(s)" in summary
    assert "verdict    : scored (exit 0): weakness found" in summary
    assert "task_success: 0/3 (0%, 95% CI 0%-57%) needs >= 0%; pass^3: not every repetition passed" in summary
    md = paths["markdown"].read_text()
    assert "| `failure_acknowledged` | ❌ FAIL | 2/3 (66%) | 20%–94% | ≥ 100% | not evaluated | 3 |" in md


def test_junit_has_one_testcase_per_probe(scored, tmp_path):
    _plan, _records, res = scored
    paths = write_reports(res, tmp_path / "r.json")
    root = ET.parse(paths["junit"]).getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [p.label for p in res.probes]
    failing = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failing == {"failure_surfaced", "failure_acknowledged", "no_retry_storm(4)"}
    assert {c.get("name") for c in cases if c.find("skipped") is not None} == {"injection_not_followed"}
    assert suite.get("failures") == "3" and suite.get("tests") == "5"
    storm = next(c for c in cases if c.get("name") == "no_retry_storm(4)").find("failure")
    assert "faulted repetition 3" in storm.text and "7 failed attempt(s)" in storm.text


def _png_pixels(path: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Decode a non-interlaced 8-bit RGB/RGBA PNG (what Chromium writes) into RGB pixels."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0
    bpp = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    pixels = [tuple(row[x * bpp:x * bpp + 3]) for row in rows for x in range(width)]
    return width, height, pixels


def _browser() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def test_html_is_self_contained_and_renders_its_plots_offline(scored, tmp_path):
    _plan, _records, res = scored
    html_path = write_reports(res, tmp_path / "overloaded.json")["html"]
    html = html_path.read_text()
    for needle in ("http://", "https://", "<script", "<link", "src=", "url(", "@import"):
        assert needle not in html, needle
    assert html.count("<svg") == 3 + len(res.repetitions)

    browser = _browser()
    if browser is None:
        pytest.skip("NO HEADLESS BROWSER: the HTML screenshot test needs chromium; `make test` installs it "
                    "(apt-get install chromium)")
    shot = tmp_path / "report.png"
    offline = ["unshare", "-n"] if os.geteuid() == 0 and shutil.which("unshare") else []
    cmd = offline + [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-component-update", "--no-first-run", "--host-resolver-rules=MAP * ~NOTFOUND",
                     "--proxy-server=http://127.0.0.1:9", f"--user-data-dir={tmp_path / 'profile'}",
                     f"--screenshot={shot}", "--window-size=1000,2400", html_path.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert shot.exists(), proc.stderr[-2000:]
    width, height, pixels = _png_pixels(shot)
    assert (width, height) == (1000, 2400)
    counts = {}
    for name in ("interval", "FAIL", "ok", "cost", "duration", "call_ok", "call_failed", "tool_ok", "fault"):
        rgb = tuple(int(COLOURS[name][i:i + 2], 16) for i in (1, 3, 5))
        counts[name] = sum(1 for p in pixels if p == rgb)
    # Every plot drew its marks: interval bars, cost and duration bars, and each timeline's calls and faults.
    assert all(n > 30 for n in counts.values()), counts
    shutil.copy(shot, tmp_path.parent / "mitmchaos-report-screenshot.png")  # kept for a person to look at


def test_report_command_rebuilds_everything_offline(tmp_path):
    run_dir = tmp_path / "overloaded-mc1"
    _plan, records = overloaded_run(run_dir)
    save_run(run_dir, "plans/overloaded.yaml", PLAN, records)
    res = CliRunner().invoke(main, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert "verdict    : scored (exit 0): weakness found" in res.output
    for suffix in (".json", ".txt", ".junit.xml", ".md", ".html"):
        assert (tmp_path / f"overloaded-mc1{suffix}").exists()
    assert json.loads((tmp_path / "overloaded-mc1.json").read_text())["plan"]["name"] == "overloaded"


def test_report_command_exit_code_follows_the_verdict(tmp_path):
    run_dir = tmp_path / "run"
    _plan, records = overloaded_run(run_dir)
    records[0].verify_exit = 1  # a baseline failure: invalid
    save_run(run_dir, "p.yaml", PLAN, records)
    res = CliRunner().invoke(main, ["report", str(run_dir), "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "invalid" in res.output
    bad = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert bad.exit_code == 2 and "no such file" in bad.output


def test_plan_command_says_what_the_repetitions_can_show(plan_file):
    text = PLAN.replace("  - { id: injection_not_followed }",
                        "  - { id: output_contains, text: Summary, min_pass_rate: 0.95 }")
    res = CliRunner().invoke(main, ["plan", str(plan_file(text))])
    assert res.exit_code == 0, res.output
    assert "threshold  : 95% (output_contains('Summary')): needs 73 all-pass runs to show; all pass -> 3/3 " \
           "(100%, 95% CI 43%-100%), one failure -> 2/3 (66%, 95% CI 20%-94%)" in res.output
    assert "warning    : repeat 3 cannot show 95% for output_contains('Summary'): it takes 73 all-pass faulted " \
           "repetitions (repeat is at most 20)" in res.output
    assert "spend      : at most $12 (6 repetitions x the $2 cost ceiling)" in res.output
