"""What every fault shares: matching a call, counting it, and deciding whether to fault it.

One ``ChaosState`` per repetition (per proxy, resolver or gate process). Each injecting
component asks ``consider`` once per call it could fault, naming the fault ids it can
inject at that point; the state walks the plan's faults in order and returns the first
``Injection`` that applies, recording skipped decisions (probability, budgets) as events.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from mitmchaos import decisions
from mitmchaos.addons.headers import header
from mitmchaos.events import EventWriter
from mitmchaos.globs import glob_matches

if TYPE_CHECKING:
    from mitmchaos.plan import Plan

BLOCKED = "mitmchaos.blocked"  # flow.metadata key set by the egress policy; faults never touch such flows
MATCHING_CACHE_SIZE = 4096  # (ids, target) pairs remembered by ChaosState.matching


def pretty_host(request) -> str:
    """``request.pretty_host``: the addons ask for it several times per request, so its parse is cached."""
    data = request.data
    # request.host_header: the authority of HTTP/2 and /3, else (or if empty) the Host header
    authority = request.authority if data.authority and data.http_version in _AUTHORITY_VERSIONS else ""
    authority = authority or header(data.headers, "host")
    return _authority_host(authority) if authority else data.host


_AUTHORITY_VERSIONS = (b"HTTP/2.0", b"HTTP/3")


@lru_cache(maxsize=1024)
def _authority_host(authority: str) -> str:
    from mitmproxy.net.http import url  # here: the resolver and the gate use this module without mitmproxy

    return url.parse_authority(authority, check=False)[0]


class Target(NamedTuple):
    """The call a fault may hit. ``key`` feeds the decision hash, so keep it stable.

    A tuple, not a dataclass: each call looks its faults up by target, and a tuple hashes and
    compares in C."""

    host: str | None = None
    model: str | None = None
    tool: str | None = None

    @property
    def key(self) -> str:
        return f"host={self.host or ''};model={self.model or ''};tool={self.tool or ''}"

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in (("host", self.host), ("model", self.model), ("tool", self.tool)) if v}


@dataclass
class Injection:
    """A decision to fault one call. The injector applies it, then calls ``applied``."""

    state: ChaosState
    fault_index: int
    fault: Any  # the plan's fault entry (a FaultSpec member)
    target: Target
    ordinal: int
    sampled: float
    options: Any = field(init=False)

    def __post_init__(self):
        self.options = self.fault.options()

    @property
    def id(self) -> str:
        return self.fault.id

    @property
    def canary(self) -> str:
        return self.state.canary

    def rng(self) -> random.Random:
        """Seeded randomness for this decision (same plan, seed and call: same draws)."""
        s = self.state
        return decisions.rng(s.seed, s.repetition, self.fault_index, self.ordinal, self.target.key)

    def applied(self, **details: Any) -> dict[str, Any]:
        """Count the injection and write its fault_injected event (details: what was done)."""
        return self.state._record_injection(self, details)


class ChaosState:
    def __init__(self, plan: Plan, events: EventWriter, canary: str, repetition: int = 0, seed: int | None = None):
        self.plan = plan
        self.events = events
        self.canary = canary
        self.repetition = repetition
        self.seed = plan.seed if seed is None else seed
        self.seen = [0] * len(plan.faults)  # matching calls per fault
        self.injected = [0] * len(plan.faults)
        self.total_injected = 0
        self.latency_used_s = 0.0
        self._matching: dict[tuple[tuple[str, ...], Target], list[tuple[int, Any]]] = {}

    @property
    def run_id(self) -> str:
        return self.events.run_id

    def faults_of(self, ids: Iterable[str]) -> list[tuple[int, Any]]:
        wanted = set(ids)
        return [(i, f) for i, f in enumerate(self.plan.faults) if f.id in wanted]

    def matching(self, ids: Iterable[str], target: Target) -> list[tuple[int, Any]]:
        """The faults among ``ids`` whose match takes ``target``, in plan order.

        Remembered: every request asks again for the same few (ids, target) pairs.
        """
        key = (tuple(ids), target)
        found = self._matching.get(key)
        if found is None:
            if len(self._matching) >= MATCHING_CACHE_SIZE:
                self._matching.clear()
            found = self._matching[key] = [(i, f) for i, f in self.faults_of(key[0]) if _matches(f.match, target)]
        return found

    def announce(self, handles: Iterable[str], **extra: Any) -> None:
        """Write plan_loaded for this component, naming the plan's faults it can inject."""
        handles = set(handles)
        self.events.emit(
            "plan_loaded",
            plan=self.plan.name,
            seed=self.seed,
            repetition=self.repetition,
            canary=self.canary,
            faults=[f.id for f in self.plan.faults],
            injects=sorted({f.id for f in self.plan.faults if f.id in handles}),
            **extra,
        )

    def consider(self, ids: Iterable[str], target: Target, flow: Any = None) -> Injection | None:
        """The first fault among ``ids`` that applies to this call, or None."""
        if flow is not None and flow.metadata.get(BLOCKED):
            return None
        for index, fault in self.matching(ids, target):
            ordinal = self.seen[index]
            self.seen[index] += 1
            if ordinal < fault.after_calls:
                continue
            if fault.times is not None and self.injected[index] >= fault.times:
                continue
            sampled = decisions.sample(self.seed, self.repetition, index, ordinal, target.key)
            if sampled >= fault.probability:
                self._skip(index, fault, target, ordinal, sampled, "probability")
                continue
            if self.plan.max_faults is not None and self.total_injected >= self.plan.max_faults:
                self._skip(index, fault, target, ordinal, sampled, "max_faults")
                continue
            return Injection(self, index, fault, target, ordinal, sampled)
        return None

    def grant_latency(self, injection: Injection, delay_s: float) -> bool:
        """Whether the repetition's latency budget still allows ``delay_s``; records a skip if not."""
        if self.latency_used_s + delay_s > self.plan.latency_budget_s:
            self._skip(injection.fault_index, injection.fault, injection.target, injection.ordinal,
                       injection.sampled, "latency_budget", delay_s=round(delay_s, 3))
            return False
        self.latency_used_s += delay_s
        return True

    def _skip(self, index, fault, target, ordinal, sampled, reason, **details) -> None:
        self.events.emit("fault_skipped", fault=fault.id, fault_index=index, target=target.as_dict(),
                         ordinal=ordinal, sampled=round(sampled, 6), probability=fault.probability,
                         reason=reason, **details)

    def _record_injection(self, inj: Injection, details: dict[str, Any]) -> dict[str, Any]:
        self.injected[inj.fault_index] += 1
        self.total_injected += 1
        return self.events.emit(
            "fault_injected",
            fault=inj.id,
            fault_index=inj.fault_index,
            canary=self.canary,
            target=inj.target.as_dict(),
            ordinal=inj.ordinal,
            sampled=round(inj.sampled, 6),
            probability=inj.fault.probability,
            safety=inj.fault.fault_type.safety,
            **details,
        )


def _matches(match, target: Target) -> bool:
    for name in ("host", "model", "tool"):
        pattern = getattr(match, name)
        if pattern is not None and not glob_matches(pattern, getattr(target, name)):
            return False
    return True
