"""What a human sees of a fault in mitmweb, and what tools read back from saved flows.

mitmweb shows ``flow.comment`` and ``flow.marked`` but not ``flow.metadata``, so the
comment names the fault and canary; the machine-readable record goes to metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mitmproxy import http

METADATA_KEY = "mitmchaos"
MARK = ":boom:"


def annotate(flow: http.HTTPFlow, event: dict[str, Any], summary: str) -> None:
    """Record a fault_injected ``event`` on the flow; ``summary`` says briefly what was done."""
    note = f"mitmchaos: {event['fault']} {summary} [{event['canary']}]"
    flow.comment = f"{flow.comment}\n{note}" if flow.comment else note
    flow.marked = MARK
    record = {k: v for k, v in event.items() if k not in ("ts", "run_id", "component", "type")}
    flow.metadata.setdefault(METADATA_KEY, {}).setdefault("faults", []).append(record)
