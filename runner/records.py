"""What the runner hands to scoring for each repetition: paths to its artifacts and its outcome."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Phase = Literal["baseline", "faulted"]


@dataclass
class RepetitionRecord:
    index: int  # position within its phase, from 0
    phase: Phase
    run_id: str
    canary: str
    artifacts: Path  # directory holding events.jsonl, agent.out, verify.out, proxy.log, flows.mitm
    agent_exit: int | None = None
    verify_exit: int | None = None  # None: verify did not run (aborted or errored)
    duration_s: float = 0.0  # the agent's wall-clock time
    abort: dict[str, Any] | None = None  # {"condition", "value", "observed"} when an abort condition fired
    error: str | None = None  # a runner or sandbox error that ended the repetition
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def events_path(self) -> Path:
        return self.artifacts / "events.jsonl"

    @property
    def agent_output_path(self) -> Path:
        return self.artifacts / "agent.out"

    @property
    def verify_output_path(self) -> Path:
        return self.artifacts / "verify.out"

    @property
    def proxy_log_path(self) -> Path:
        return self.artifacts / "proxy.log"

    @property
    def flows_path(self) -> Path:
        return self.artifacts / "flows.mitm"

    def agent_output(self) -> str:
        p = self.agent_output_path
        return p.read_text(errors="replace") if p.exists() else ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["artifacts"] = str(self.artifacts)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RepetitionRecord:
        return cls(**{**data, "artifacts": Path(data["artifacts"])})
