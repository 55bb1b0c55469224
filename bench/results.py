"""Figures, their goals, and the Markdown/JSON files ``make bench`` writes."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Figure:
    bench: str
    name: str
    value: float  # the median over rounds
    unit: str
    spread: tuple[float, float] | None = None  # min and max over rounds
    goal: str = ""  # human-readable, e.g. "≤ 1.10× bare"
    ratio: float | None = None  # against what the goal compares with (median of paired per-round ratios)
    met: bool | None = None  # None: no goal
    note: str = ""

    def row(self) -> str:
        spread = f"{_num(self.spread[0])}–{_num(self.spread[1])}" if self.spread else ""
        ratio = f"{self.ratio:.2f}×" if self.ratio is not None else ""
        met = {True: "yes", False: "**NO**", None: ""}[self.met]
        return (
            f"| {self.bench} | {self.name} | {_num(self.value)} {self.unit} | {spread} | {self.goal} "
            f"| {ratio} | {met} |"
        )


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(values: list[float]) -> tuple[float, float]:
    return (min(values), max(values))


def paired_ratio(numerators: list[float], denominators: list[float]) -> float:
    """Median of per-round ratios: rounds ran back to back, so each pair saw the same machine load."""
    return median([n / d for n, d in zip(numerators, denominators, strict=True) if d])


def machine() -> str:
    """'2 cores, 24 GiB, Debian 12' style: no host names, no paths."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        release = platform.freedesktop_os_release()
        system = f"{release.get('NAME', 'Linux').split()[0]} {release.get('VERSION_ID', '')}".strip()
    except OSError:
        system = platform.system()
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {system}, Python {platform.python_version()}"


def write(figures: list[Figure], out_dir: Path, settings: dict, loads: list[float]) -> tuple[Path, Path]:
    """``loads``: the 1-minute load average sampled between benchmarks, the other work on the machine."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    missed = [f for f in figures if f.met is False]
    doc = {
        "date": stamp,
        "machine": machine(),
        "load_average": [min(loads), max(loads)],
        "settings": settings,
        "figures": [asdict(f) for f in figures],
        "missed": [f"{f.bench}: {f.name}" for f in missed],
    }
    json_path = out_dir / "latest.json"
    json_path.write_text(json.dumps(doc, indent=2) + "\n")
    md_path = out_dir / "latest.md"
    md_path.write_text(markdown(figures, stamp, settings, loads))
    return md_path, json_path


def markdown(figures: list[Figure], stamp: str, settings: dict, loads: list[float]) -> str:
    lines = [
        f"Measured {stamp} on {machine()}, load average {min(loads):.1f}–{max(loads):.1f}; "
        + ", ".join(f"{k} {v}" for k, v in settings.items())
        + ".",
        "Value: median over rounds; spread: min–max over rounds; ratio: median of paired per-round ratios.",
        "",
        "| benchmark | figure | value | spread | goal | ratio | met |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f.row() for f in figures]
    notes = [f"- {f.bench}, {f.name}: {f.note}" for f in figures if f.note]
    missed = [f for f in figures if f.met is False]
    lines += [
        "",
        "Missed goals: " + ("; ".join(f"{f.bench}: {f.name}" for f in missed) if missed else "none") + ".",
    ]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"
