"""Scoring: ``mitmchaos report`` (every probe, every report format) over a synthetic run
directory of 40 repetitions, in its own process so its wall time and peak RSS are its own.
A run this large is read by worker processes, one per CPU: its CPU time includes theirs, and
its peak RSS is that of the largest process (``wait4`` reports no sum).

Memory must not grow with the events (streamed, not loaded whole): the same 40 repetitions
are scored with a quarter of the lines too, and the peak RSS of the two compared.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mitmchaos.records import RepetitionRecord
from mitmchaos.rundir import save_run
from mitmchaos.scoring import PARALLEL_MIN_BYTES

from bench.results import Figure, median, spread

WALL_GOAL_S = 5.0
RSS_GROWTH_GOAL = 1.25  # peak RSS with all the lines over the peak with a quarter of them
CANARY = "E-CHAOS-5c0ffee5"
MODEL = "claude-sonnet-4-6"
PLAN = f"""\
name: bench-scoring
agent: "true"
verify: "true"
repeat: 20
prices: {{ "claude-*": {{ input: 3, output: 15 }} }}
faults:
  - {{ id: llm.upstream_5xx, match: {{ model: {MODEL} }}, status: 529, probability: 0.01 }}
  - {{ id: tool.error, match: {{ tool: Bash }}, probability: 0.01 }}
  - {{ id: egress.dns_fail, match: {{ host: "*.npm-registry.test" }} }}
probes:
  - {{ id: task_success }}
  - {{ id: no_destructive_attempt }}
  - {{ id: failure_surfaced }}
  - {{ id: failure_acknowledged }}
  - {{ id: no_policy_hits }}
  - {{ id: cost_multiplier_below, value: 3 }}
  - {{ id: recovered_within, value: 5 }}
  - {{ id: canary_not_leaked }}
  - {{ id: injection_not_followed }}
  - {{ id: tool_called, tool: Bash }}
  - {{ id: tool_not_called, tool: deploy }}
  - {{ id: output_matches, pattern: "done|finished" }}
  - {{ id: output_contains, text: done }}
  - {{ id: output_not_contains, text: "rm -rf" }}
  - {{ id: completes_within, value: 600 }}
  - {{ id: tokens_within, value: 100000000 }}
  - {{ id: cost_within, value: 1000 }}
  - {{ id: max_llm_calls, value: 100000 }}
  - {{ id: max_tool_calls, value: 100000 }}
  - {{ id: retry_after_honoured }}
  - {{ id: no_retry_storm, value: 10 }}
  - {{ id: backoff }}
  - {{ id: gave_up_gracefully }}
abort:
  - cost_usd_above: 1000
"""


def events(lines: int, faulted: bool) -> str:
    """One repetition's events: model calls, tool calls and results, DNS queries (as many of each);
    in a faulted repetition, a failed model call every 100 lines."""
    base = {"run_id": "bench", "component": "proxy"}
    injects = ["llm.upstream_5xx", "tool.error", "egress.dns_fail"]
    out = [
        json.dumps(
            {
                "ts": 0.0,
                **base,
                "type": "plan_loaded",
                "plan": "bench-scoring",
                "seed": 0,
                "repetition": 0,
                "canary": CANARY,
                "faults": injects,
                "injects": injects,
            }
        )
    ]
    ts = 1.0
    while len(out) < lines:
        n = len(out)
        ts += 0.01
        if faulted and n % 100 == 0:
            out.append(
                json.dumps(
                    {
                        "ts": ts,
                        **base,
                        "type": "fault_injected",
                        "fault": "llm.upstream_5xx",
                        "fault_index": 0,
                        "canary": CANARY,
                        "target": {"model": MODEL},
                        "ordinal": n,
                        "sampled": 0.001,
                        "probability": 0.01,
                        "safety": "fail-safe",
                        "status": 529,
                    }
                )
            )
        elif n % 4 == 0:
            out.append(
                json.dumps(
                    {
                        "ts": ts,
                        **base,
                        "type": "llm_call",
                        "provider": "anthropic",
                        "host": "api.anthropic.com",
                        "path": "/v1/messages",
                        "requested_model": MODEL,
                        "model": MODEL,
                        "status": 200,
                        "stream": True,
                        "stop_reason": "tool_use",
                        "usage": {
                            "input_tokens": 1200,
                            "output_tokens": 80,
                            "cache_read_tokens": 0,
                            "cache_write_tokens": 0,
                        },
                        "cost_usd": 0.0048,
                        "duration_s": 0.9,
                        "retry_count": 0,
                        "faulted": None,
                        "error": None,
                    }
                )
            )
        elif n % 4 == 1:
            out.append(
                json.dumps(
                    {
                        "ts": ts,
                        **base,
                        "type": "tool_call",
                        "tool": "Bash",
                        "tool_key": "Bash",
                        "call_id": f"call_{n}",
                        "input": {"command": "ls -la src"},
                        "source": "model",
                    }
                )
            )
        elif n % 4 == 2:
            out.append(
                json.dumps(
                    {
                        "ts": ts,
                        **base,
                        "type": "tool_result",
                        "tool": "Bash",
                        "tool_key": "Bash",
                        "call_id": f"call_{n - 1}",
                        "ok": True,
                        "error": None,
                        "source": "model",
                    }
                )
            )
        else:
            out.append(
                json.dumps(
                    {
                        "ts": ts,
                        "run_id": "bench",
                        "component": "resolver",
                        "type": "dns_query",
                        "name": "registry.npm-registry.test",
                        "qtype": "A",
                        "rcode": "NOERROR",
                        "faulted": False,
                        "transport": "udp",
                    }
                )
            )
    return "\n".join(out) + "\n"


def make_run(run_dir: Path, repetitions: int, lines_per_repetition: int) -> None:
    """A run directory as ``mitmchaos run`` leaves it (runner/rundir.py), half baseline, half faulted."""
    templates = {phase: events(lines_per_repetition, phase == "faulted") for phase in ("baseline", "faulted")}
    records = []
    for phase in ("baseline", "faulted"):
        for index in range(repetitions // 2):
            artifacts = run_dir / f"{phase}-{index + 1}"
            artifacts.mkdir(parents=True)
            (artifacts / "events.jsonl").write_text(templates[phase])
            stdout = f"done; the model API failed with 529 ({CANARY})" if phase == "faulted" else "done"
            (artifacts / "agent.out").write_text(stdout + "\n")
            (artifacts / "verify.out").write_text("")
            records.append(
                RepetitionRecord(
                    index,
                    phase,
                    f"bench-{phase[0]}{index}",
                    CANARY,
                    artifacts,
                    agent_exit=0,
                    verify_exit=0,
                    duration_s=120.0,
                )
            )
    save_run(run_dir, "bench-scoring.yaml", PLAN, records)


def report(run_dir: Path) -> tuple[float, float, float]:
    """Run ``mitmchaos report``; returns its wall time (s), CPU time (s) and peak RSS (MiB)."""
    out = run_dir.parent / f"{run_dir.name}-report" / "report.json"
    cli = Path(sys.executable).with_name("mitmchaos")
    started = time.perf_counter()
    process = subprocess.Popen(
        [str(cli), "report", str(run_dir), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    if process.returncode not in (0, 1, 2) or not out.exists():  # 0-2 are verdicts
        raise RuntimeError(f"mitmchaos report failed ({process.returncode}): {stderr[-2000:]}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def run(total_lines: int = 1_000_000, repetitions: int = 40, rounds: int = 3) -> list[Figure]:
    per_repetition = total_lines // repetitions
    work = Path(tempfile.mkdtemp(prefix="mitmchaos-bench-scoring-"))
    try:
        full, quarter = work / "run-full", work / "run-quarter"
        make_run(full, repetitions, per_repetition)
        make_run(quarter, repetitions, per_repetition // 4)
        walls, cpus, rss, quarter_rss = [], [], [], []
        for _ in range(rounds):  # interleaved, like every benchmark here
            wall, cpu, peak = report(full)
            walls.append(wall)
            cpus.append(cpu)
            rss.append(peak)
            quarter_rss.append(report(quarter)[2])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    size = f"{repetitions} repetitions, {per_repetition * repetitions:,} event lines"
    growth = median([r / q for r, q in zip(rss, quarter_rss)])
    return [
        Figure(
            "scoring",
            f"mitmchaos report, {size}: wall time",
            median(walls),
            "s",
            spread(walls),
            f"≤ {WALL_GOAL_S:.0f} s",
            median(walls) / WALL_GOAL_S,
            median(walls) <= WALL_GOAL_S,
            note="every probe but the judge, every report format (JSON, text, JUnit, Markdown, HTML); "
            f"events over {PARALLEL_MIN_BYTES >> 20} MiB are read by worker processes, one per CPU",
        ),
        Figure(
            "scoring",
            f"mitmchaos report, {size}: CPU time",
            median(cpus),
            "s",
            spread(cpus),
            note="user + system of the command and its worker processes: less noisy than wall time on a "
            "shared machine",
        ),
        Figure(
            "scoring",
            f"mitmchaos report, {size}: peak RSS",
            median(rss),
            "MiB",
            spread(rss),
            f"≤ {RSS_GROWTH_GOAL:.2f}× with ¼ of the lines",
            growth,
            growth <= RSS_GROWTH_GOAL,
            note=f"the largest process (the command or one of its workers); with a quarter of the lines it "
            f"peaks at {median(quarter_rss):.0f} MiB",
        ),
    ]
