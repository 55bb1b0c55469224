"""The run directory's ``run.json``: enough to score a run again, offline.

A run directory holds one subdirectory per repetition (its events, agent and verify
output, proxy log) and ``run.json``::

    {"format": "mitmchaos-run", "version": 1,
     "plan": {"path": "plans/registry-down.yaml", "text": "<the plan file as run>"},
     "records": [<RepetitionRecord.to_json()>, ...]}

Each record's ``artifacts`` is stored relative to the run directory, so the directory can
be moved, archived or attached to a CI job and ``mitmchaos report`` still finds everything.
The plan's text is stored, not just its path: the file may have changed since.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from mitmchaos.plan import Plan, parse_plan_text
from mitmchaos.records import RepetitionRecord

RUN_FILE = "run.json"
RUN_FORMAT = "mitmchaos-run"
RUN_FORMAT_VERSION = 1


@dataclass
class SavedRun:
    run_dir: Path
    plan_path: str
    plan_text: str
    plan: Plan
    records: list[RepetitionRecord]


def save_run(run_dir: str | os.PathLike, plan_path: str | os.PathLike, plan_text: str,
             records: list[RepetitionRecord]) -> Path:
    """Write ``run_dir/run.json`` (atomically: a reader never sees half a file). Returns its path."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stored = []
    for record in records:
        data = record.to_json()
        artifacts = Path(record.artifacts)
        if artifacts.is_absolute() and artifacts.resolve().is_relative_to(run_dir.resolve()):
            artifacts = artifacts.resolve().relative_to(run_dir.resolve())
        data["artifacts"] = artifacts.as_posix()
        stored.append(data)
    doc = {"format": RUN_FORMAT, "version": RUN_FORMAT_VERSION,
           "plan": {"path": str(plan_path), "text": plan_text}, "records": stored}
    target = run_dir / RUN_FILE
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    tmp.replace(target)
    return target


class RunDirError(Exception):
    pass


def load_run(run_dir: str | os.PathLike) -> SavedRun:
    """Read ``run.json``; records' artifact paths are resolved against the run directory."""
    run_dir = Path(run_dir)
    path = run_dir / RUN_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunDirError(f"{path}: no such file (is {run_dir} a mitmchaos run directory?)") from None
    except ValueError as exc:
        raise RunDirError(f"{path}: not JSON: {exc}") from None
    if doc.get("format") != RUN_FORMAT or doc.get("version") != RUN_FORMAT_VERSION:
        raise RunDirError(f"{path}: not a {RUN_FORMAT} file of version {RUN_FORMAT_VERSION} "
                          f"(format {doc.get('format')!r}, version {doc.get('version')!r})")
    plan_path = doc["plan"]["path"]
    text = doc["plan"]["text"]
    records = []
    for data in doc["records"]:
        record = RepetitionRecord.from_json(data)
        if not record.artifacts.is_absolute():
            record.artifacts = run_dir / record.artifacts
        records.append(record)
    return SavedRun(run_dir, plan_path, text, parse_plan_text(text, plan_path), records)
