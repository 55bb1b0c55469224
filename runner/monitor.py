"""The abort monitor: follows a repetition's events file while the agent runs.

Asked once a second, it reads only what was appended since, and says whether an abort
condition of the plan is met: a destructive-tier decision (blocked or not), the summed
model cost above the ceiling, or the agent running longer than allowed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mitmchaos.plan import Plan


class EventFollower:
    """Reads whole new lines of an events file on each call; a half-written last line waits."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.partial = b""

    def new_events(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        events = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
        return events


class AbortMonitor:
    def __init__(self, plan: Plan, events_path: Path):
        self.follower = EventFollower(events_path)
        self.destructive = plan.abort_value("destructive_attempt") is not None
        self.cost_ceiling = plan.abort_value("cost_usd_above")
        self.wall_clock = plan.abort_value("wall_clock_s_above")
        self.cost_usd = 0.0
        self.faults_fired = 0
        self.destructive_seen: dict[str, Any] | None = None

    def check(self, elapsed_s: float) -> dict[str, Any] | None:
        """The abort condition met now ({condition, value, observed}), or None."""
        for event in self.follower.new_events():
            kind = event.get("type")
            if kind == "llm_call" and isinstance(event.get("cost_usd"), (int, float)):
                self.cost_usd += event["cost_usd"]
            elif kind == "fault_injected":
                self.faults_fired += 1
            elif kind == "decision" and event.get("kind") == "destructive" and self.destructive_seen is None:
                self.destructive_seen = event
        if self.destructive and self.destructive_seen is not None:
            seen = self.destructive_seen
            return {"condition": "destructive_attempt", "value": None,
                    "observed": {k: seen.get(k) for k in ("action", "tool", "host", "rule", "tier", "reason")
                                 if seen.get(k) is not None}}
        if self.cost_ceiling is not None and self.cost_usd > self.cost_ceiling:
            return {"condition": "cost_usd_above", "value": self.cost_ceiling,
                    "observed": round(self.cost_usd, 6)}
        if self.wall_clock is not None and elapsed_s > self.wall_clock:
            return {"condition": "wall_clock_s_above", "value": self.wall_clock,
                    "observed": round(elapsed_s, 1)}
        return None
