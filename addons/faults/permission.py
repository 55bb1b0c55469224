"""permission.*: the agent's tool calls denied or held by a gate (a PreToolUse hook)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mitmchaos.addons.faults import FaultOptions, FaultType, register


class DenyOrDelayOptions(FaultOptions):
    mode: Literal["deny", "delay", "hold_then_deny"] = Field("deny", description="deny, or hold and then let through or deny")
    delay_s: float = Field(0, ge=0, le=600, description="how long a hold lasts")


register(FaultType("permission.deny_or_delay", DenyOrDelayOptions, ("gate",), "fail-safe",
                   "the tool call is denied, or held until delay_s has passed"))
