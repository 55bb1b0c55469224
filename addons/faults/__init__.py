"""The fault catalog.

One module per fault family; each fault registers a ``FaultType`` naming its id, its
options model, which component injects it and whether it is fail-safe (the agent sees a
failure) or mutating (the agent sees changed content). The plan models, ``mitmchaos
list`` and the README's catalog are all built from ``REGISTRY``. A new fault is one
small module that calls ``register``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

Safety = Literal["fail-safe", "mutating"]
Component = Literal["proxy", "resolver", "mcp", "gate"]


class FaultOptions(BaseModel):
    """Base of every fault's own options (they sit flat beside id and match in the plan)."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class FaultType:
    id: str
    options: type[FaultOptions]
    injected_by: tuple[Component, ...]
    safety: Safety
    effect: str
    requires_host: bool = False
    requires_tool: bool = False

    @property
    def family(self) -> str:
        return self.id.split(".", 1)[0]

    def option_summary(self) -> list[str]:
        """Human-readable ``name (default X)`` lines for the catalog."""
        lines = []
        for name, field in self.options.model_fields.items():
            default = "required" if field.is_required() else f"default {_show(field.get_default(call_default_factory=True))}"
            lines.append(f"{name} ({default})")
        if self.requires_host:
            lines.append("match.host (required)")
        if self.requires_tool:
            lines.append("match.tool (required)")
        return lines


def _show(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


REGISTRY: dict[str, FaultType] = {}


def register(fault: FaultType) -> FaultType:
    if fault.id in REGISTRY:
        raise ValueError(f"fault {fault.id} registered twice")
    REGISTRY[fault.id] = fault
    return fault


# Importing the family modules fills the registry.
from mitmchaos.addons.faults import llm, tool, mcp, permission, inject, egress  # noqa: E402,F401,I001  (catalog order)
