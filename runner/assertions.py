"""Assertions over a repetition's events, for tests that run an agent or SDK through the proxy.

    from mitmchaos.assertions import Expect
    expect = Expect(proxy.events())
    expect.fault_fired("llm.rate_limit")
    expect.llm_call(status=429)
    expect.recovered_after_fault(tool="Bash")

Each method raises AssertionError with the events that were there instead, and returns
the matching events so a test can look closer.
"""

from __future__ import annotations

from typing import Any


def _summary(events: list[dict]) -> str:
    keys = ("type", "fault", "status", "tool", "ok", "kind", "action")
    lines = [", ".join(f"{k}={e[k]}" for k in keys if k in e) for e in events]
    return "\n  ".join(lines) or "(no events)"


def _matches(event: dict, fields: dict[str, Any]) -> bool:
    return all(event.get(k) == v for k, v in fields.items())


class Expect:
    def __init__(self, events: list[dict]):
        self.events = events

    def _of(self, type: str, **fields: Any) -> list[dict]:
        return [e for e in self.events if e.get("type") == type and _matches(e, fields)]

    def _require(self, type: str, fields: dict[str, Any], times: int | None) -> list[dict]:
        found = self._of(type, **fields)
        ok = bool(found) if times is None else len(found) == times
        if not ok:
            want = f"{times} " if times is not None else ""
            raise AssertionError(f"expected {want}{type} event(s) with {fields}, found {len(found)}; events were:\n  "
                                 f"{_summary(self.events)}")
        return found

    def fault_fired(self, fault: str | None = None, times: int | None = None, **fields: Any) -> list[dict]:
        if fault is not None:
            fields["fault"] = fault
        return self._require("fault_injected", fields, times)

    def no_fault_fired(self) -> None:
        self._require("fault_injected", {}, 0)

    def llm_call(self, times: int | None = None, **fields: Any) -> list[dict]:
        return self._require("llm_call", fields, times)

    def tool_call(self, times: int | None = None, **fields: Any) -> list[dict]:
        return self._require("tool_call", fields, times)

    def recovered_after_fault(self, tool: str | None = None) -> dict:
        """A successful tool result (for ``tool``, if given) after the last injected fault."""
        last_fault = max((i for i, e in enumerate(self.events) if e.get("type") == "fault_injected"), default=None)
        if last_fault is None:
            raise AssertionError(f"no fault fired; events were:\n  {_summary(self.events)}")
        for event in self.events[last_fault + 1:]:
            if event.get("type") == "tool_result" and event.get("ok") and tool in (None, event.get("tool"),
                                                                                     event.get("tool_key")):
                return event
        raise AssertionError(f"no successful tool result{f' for {tool}' if tool else ''} after the last fault; "
                             f"events were:\n  {_summary(self.events)}")
