"""The probe catalog: what a repetition is scored on.

A probe is a pure function over one repetition's ``Evidence`` (its events, the agent's
stdout, exit codes, the baseline's figures) that returns a ``ProbeResult``: passed,
failed, or not evaluated (with the reason). Each probe registers its id, its parameters
model (parameters sit flat beside ``id`` and ``weight`` in the plan) and its function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Kind = Literal["outcome", "security", "availability", "consumption", "behaviour"]


class ProbeParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class ProbeType:
    id: str
    params: type[ProbeParams]
    kind: Kind
    passes_when: str
    evaluate: Callable[..., Any]
    # Compares a repetition with the mean baseline cost (``Evidence.baseline_cost``), so it reads
    # only the evidence's figures, never its event lists: scoring evaluates it once every
    # repetition is read, on each one's figures (``Evidence.figures``).
    reads_baseline: bool = False


REGISTRY: dict[str, ProbeType] = {}


def register(probe: ProbeType) -> ProbeType:
    if probe.id in REGISTRY:
        raise ValueError(f"probe {probe.id} registered twice")
    REGISTRY[probe.id] = probe
    return probe


from mitmchaos.probes import catalog  # noqa: E402,F401  (fills the registry)
