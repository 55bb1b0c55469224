"""The permission gate: checks each tool call before the agent runs it.

Used by the Claude Code PreToolUse hook (sandbox/gate/pretooluse.py) and importable by any
harness that can ask before running a tool:

    gate = Gate.from_env()               # MITMCHAOS_PLAN, MITMCHAOS_EVENTS, ... (None without a plan)
    answer = gate.check("Bash", {"command": "npm test"}, call_id="toolu_1", workspace="/work")
    if not answer.allowed:
        raise ToolRefused(answer.code, answer.message)     # code: HELD, CHAOS_FAULT or DESTRUCTIVE

A gate only ever refuses: when it lets a call through it has no opinion, and the harness's
own permission rules still apply (a fault never loosens governance). Each check writes a
tool_call event, a `decision` for a destructive call (blocked when the interlock is on) and
injects permission.deny_or_delay:

- deny: the call is refused with the canary.
- delay / hold_then_deny: the call is held. Its identical retry (same tool, same input) is
  held again until delay_s has passed since the first refusal; the first retry after that is
  let through (delay) or refused with the canary (hold_then_deny), and the hold is over. One
  hold is one injection; a different call is neither a retry nor a release.

A hook runs once per tool call, so the counters and holds live in a state file next to the
events file (``<events>.gate-state.json``), locked while a check runs.

The sandbox has python3 but none of mitmchaos's dependencies, so ``install_hook`` copies the
gate with the few standard-library modules it needs into a project's ``.mitmchaos/hooks/``,
and the gate there reads the plan as JSON (``gate_plan_json``; a YAML plan needs the whole
package).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from mitmchaos import decisions
from mitmchaos.addons.state import ChaosState, Target
from mitmchaos.destructive import DEFAULT_WORKSPACE, classify_call
from mitmchaos.events import EventWriter
from mitmchaos.tools import safe_input, tool_key

if TYPE_CHECKING:
    from mitmchaos.plan import Plan

FAULT = "permission.deny_or_delay"
HANDLES = (FAULT,)
SAFETY = {FAULT: "fail-safe"}  # as registered; the sandboxed gate has no registry
PREFIX = "[mitmchaos]"
HOOK_DIR = ".mitmchaos/hooks"
HOOK_SCRIPT = "pretooluse.py"
# what the gate imports, all standard library: copied next to the hook for the sandbox
STDLIB_MODULES = (
    "mitmchaos",
    "mitmchaos.decisions",
    "mitmchaos.events",
    "mitmchaos.globs",
    "mitmchaos.destructive",
    "mitmchaos.tools",
    "mitmchaos.gate",
    "mitmchaos.addons",
    "mitmchaos.addons.headers",
    "mitmchaos.addons.state",
)


@dataclass(frozen=True)
class Answer:
    allowed: bool
    code: str | None = None  # HELD, CHAOS_FAULT or DESTRUCTIVE when refused
    message: str | None = None


ALLOW = Answer(True)


class Gate:
    def __init__(
        self,
        plan: Plan | None,
        events: EventWriter,
        canary: str,
        repetition: int = 0,
        seed: int | None = None,
        state_path: str | os.PathLike | None = None,
        interlock: bool = True,
        clock: Callable[[], float] = time.time,
    ):
        self.events = events
        self.chaos = ChaosState(plan, events, canary, repetition, seed) if plan is not None else None
        self.state_path = Path(state_path) if state_path else None
        self.interlock = interlock
        self.clock = clock
        self.holds: dict[str, dict[str, Any]] = {}
        self.announced = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Gate:
        """A gate configured the way the runner configures a sandbox (MITMCHAOS_* variables)."""
        plan_path = environ.get("MITMCHAOS_PLAN")
        events_path = environ.get("MITMCHAOS_EVENTS") or None
        seed = environ.get("MITMCHAOS_SEED")
        return cls(
            plan=load_gate_plan(plan_path) if plan_path else None,
            events=EventWriter(
                events_path, environ.get("MITMCHAOS_RUN_ID") or f"adhoc-{secrets.token_hex(4)}", "gate"
            ),
            canary=environ.get("MITMCHAOS_CANARY") or decisions.new_canary(),
            repetition=int(environ.get("MITMCHAOS_REPETITION") or 0),
            seed=int(seed) if seed else None,
            state_path=f"{events_path}.gate-state.json" if events_path else None,
            interlock=environ.get("MITMCHAOS_INTERLOCK", "1").lower() not in ("0", "false", "no", "off"),
        )

    def check(
        self, tool: str, tool_input: Any, call_id: str | None = None, workspace: str = DEFAULT_WORKSPACE
    ) -> Answer:
        with self._persisted():
            if not self.announced and self.chaos is not None:
                self.chaos.announce(HANDLES)
                self.announced = True
            call = {"tool": tool, "tool_key": tool_key(tool), "call_id": call_id}
            self.events.emit("tool_call", **call, input=safe_input(tool_input), source="gate")
            answer = self._destructive(tool, tool_input, call_id, workspace) or self._permission(
                tool, tool_input, call_id
            )
            if not answer.allowed:
                self.events.emit("tool_result", **call, ok=False, error=answer.message, source="gate")
            return answer

    def _destructive(self, tool: str, tool_input: Any, call_id: str | None, workspace: str) -> Answer | None:
        verdict = classify_call(tool, tool_input, workspace)
        if verdict is None:
            return None
        self.events.emit(
            "decision",
            kind="destructive",
            action="block" if self.interlock else "observe",
            tool=tool,
            call_id=call_id,
            **verdict.as_dict(),
        )
        if not self.interlock:
            return None
        return Answer(
            False,
            "DESTRUCTIVE",
            f"{PREFIX} BLOCKED: this call is in the destructive-command tier "
            f"({verdict.rule}): {verdict.reason}. It was not run.",
        )

    def _permission(self, tool: str, tool_input: Any, call_id: str | None) -> Answer:
        if self.chaos is None:
            return ALLOW
        key = _call_key(tool, tool_input)
        hold = self.holds.get(key)
        if hold is not None:
            return self._retry_of_hold(key, hold, tool, call_id)
        inj = self.chaos.consider(HANDLES, Target(tool=tool_key(tool)))
        if inj is None:
            return ALLOW
        opts = inj.options
        inj.applied(mode=opts.mode, delay_s=opts.delay_s, tool_call_id=call_id)
        if opts.mode == "deny":
            return self._refuse(
                tool,
                call_id,
                "deny",
                "CHAOS_FAULT",
                f"permission to run {tool} was denied. {self.chaos.canary}",
            )
        self.holds[key] = {"tool": tool, "since": self.clock(), "mode": opts.mode, "delay_s": opts.delay_s}
        return self._held(tool, call_id, opts.delay_s, 0.0)

    def _retry_of_hold(self, key: str, hold: dict[str, Any], tool: str, call_id: str | None) -> Answer:
        waited = self.clock() - hold["since"]
        if waited < hold["delay_s"]:
            return self._held(tool, call_id, hold["delay_s"], waited)
        del self.holds[key]
        if hold["mode"] == "delay":
            self.events.emit(
                "decision",
                kind="permission",
                action="allow",
                tool=tool,
                call_id=call_id,
                rule=FAULT,
                reason=f"the hold is over after {waited:.1f}s",
            )
            return ALLOW
        return self._refuse(
            tool,
            call_id,
            "deny",
            "CHAOS_FAULT",
            f"the held {tool} call was denied after its hold. {self.chaos.canary}",
        )

    def _held(self, tool: str, call_id: str | None, delay_s: float, waited: float) -> Answer:
        return self._refuse(
            tool,
            call_id,
            "hold",
            "HELD",
            f"{tool} is held for approval and was not run; the same call stays held for "
            f"{max(delay_s - waited, 0):.0f}s more. {self.chaos.canary}",
        )

    def _refuse(self, tool: str, call_id: str | None, action: str, code: str, text: str) -> Answer:
        message = f"{PREFIX} {'HELD' if action == 'hold' else 'DENIED'}: {text}"
        self.events.emit(
            "decision",
            kind="permission",
            action=action,
            tool=tool,
            call_id=call_id,
            rule=FAULT,
            reason=message,
        )
        return Answer(False, code, message)

    @contextlib.contextmanager
    def _persisted(self) -> Iterator[None]:
        """Load counters and holds from the state file, and save them back, under an exclusive lock."""
        if self.state_path is None:
            yield
            return
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.open(self.state_path, os.O_RDWR | os.O_CREAT, 0o644), "r+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            text = fh.read()
            self._restore(json.loads(text) if text.strip() else {})
            yield
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps(self._snapshot()))
            fh.flush()

    def _snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {"announced": self.announced, "holds": self.holds}
        if self.chaos is not None:
            snap.update(
                seen=self.chaos.seen, injected=self.chaos.injected, total_injected=self.chaos.total_injected
            )
        return snap

    def _restore(self, snap: dict[str, Any]) -> None:
        self.announced = snap.get("announced", False)
        self.holds = snap.get("holds", {})
        if self.chaos is not None and len(snap.get("seen", [])) == len(self.chaos.seen):
            self.chaos.seen = snap["seen"]
            self.chaos.injected = snap["injected"]
            self.chaos.total_injected = snap["total_injected"]


def _call_key(tool: str, tool_input: Any) -> str:
    canonical = json.dumps([tool, tool_input], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


# ---------------------------------------------------------------- the plan and the hook in a sandbox


@dataclass
class GateFault:
    """A plan's fault as the sandboxed gate reads it: what ChaosState needs, without pydantic."""

    id: str
    match: SimpleNamespace
    after_calls: int
    times: int | None
    probability: float
    settings: dict[str, Any]

    @property
    def fault_type(self) -> SimpleNamespace:
        return SimpleNamespace(safety=SAFETY.get(self.id, "fail-safe"))

    def options(self) -> SimpleNamespace:
        return SimpleNamespace(**self.settings)


@dataclass
class GatePlan:
    name: str
    seed: int
    max_faults: int | None
    latency_budget_s: float
    faults: list[GateFault]


def gate_plan_json(plan: Plan) -> str:
    """The JSON a sandboxed gate reads (MITMCHAOS_PLAN=<file>.json): every fault, in plan order."""
    faults = [
        {
            "id": f.id,
            "match": f.match.model_dump(),
            "after_calls": f.after_calls,
            "times": f.times,
            "probability": f.probability,
            "options": f.options().model_dump(mode="json"),
        }
        for f in plan.faults
    ]
    return json.dumps(
        {
            "name": plan.name,
            "seed": plan.seed,
            "max_faults": plan.max_faults,
            "latency_budget_s": plan.latency_budget_s,
            "faults": faults,
        }
    )


def load_gate_plan(path: str | os.PathLike) -> Plan | GatePlan:
    if not str(path).endswith(".json"):
        try:
            from mitmchaos.plan import load_plan  # the whole package: pydantic, PyYAML
        except ImportError as exc:
            raise RuntimeError(
                f"this gate cannot read the YAML plan {path} ({exc}); point MITMCHAOS_PLAN at the JSON "
                "that mitmchaos.gate.gate_plan_json(plan) writes"
            ) from exc
        return load_plan(path)
    data = json.loads(Path(path).read_text())
    faults = [
        GateFault(
            f["id"],
            SimpleNamespace(**f["match"]),
            f["after_calls"],
            f["times"],
            f["probability"],
            f["options"],
        )
        for f in data["faults"]
    ]
    return GatePlan(data["name"], data["seed"], data["max_faults"], data["latency_budget_s"], faults)


def install_hook(project: str | os.PathLike) -> list[Path]:
    """Put the gate into ``project``: the hook and its modules in .mitmchaos/hooks/, and a PreToolUse
    entry in .claude/settings.json naming the project's absolute path (the runner rewrites it to /work).
    Returns the files written."""
    project = Path(project).resolve()
    hooks = project / HOOK_DIR
    written = [hooks / HOOK_SCRIPT]
    hooks.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(str(resources.files("mitmchaos.sandbox").joinpath("gate", HOOK_SCRIPT)), written[0])
    for name in STDLIB_MODULES:
        source = Path(importlib.import_module(name).__file__)
        target = (
            hooks.joinpath(*name.split("."), "__init__.py")
            if source.name == "__init__.py"
            else hooks.joinpath(*name.split(".")).with_suffix(".py")
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        written.append(target)
    settings_path = project / ".claude" / "settings.json"
    settings = json.loads(settings_path.read_text()) if settings_path.exists() else {}
    command = f"python3 {project / HOOK_DIR / HOOK_SCRIPT}"
    entries = settings.setdefault("hooks", {}).setdefault("PreToolUse", [])
    if not any(h.get("command") == command for e in entries for h in e.get("hooks", [])):
        entries.append({"matcher": "*", "hooks": [{"type": "command", "command": command}]})
    settings_path.parent.mkdir(exist_ok=True)
    settings_path.write_text(json.dumps(settings, indent=2) + "\n")
    return [*written, settings_path]
