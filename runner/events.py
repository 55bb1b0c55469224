"""The events file: JSON Lines appended by every component, read by the probes.

Contract (version 1): every line is one JSON object with ``ts`` (seconds since the
epoch, float), ``run_id``, ``component`` and ``type``; the rest depends on the type.
Writers append whole lines with a single ``write`` on an ``O_APPEND`` descriptor, so
the proxy, the resolver, gates and the runner can share one file without locks.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVENTS_SCHEMA_VERSION = 1

EVENT_TYPES = (
    "plan_loaded",
    "fault_injected",
    "fault_skipped",
    "llm_call",
    "tool_call",
    "tool_result",
    "decision",
    "dns_query",
    "abort",
    "repetition_started",
    "repetition_finished",
)


# What json.dumps escapes and pydantic's encoder writes raw, yet str.splitlines() breaks lines
# at: a line holding one is encoded by json instead, so every reader sees one event per line.
_LINE_BREAKS = ("\u2028".encode(), "\u2029".encode(), "\x85".encode())


def _encode_json(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":"), default=str).encode()


def _encoder():
    """pydantic's Rust encoder (~5x json's on an llm_call event), or json's where it is missing:
    the gate runs in sandboxes with none of our dependencies."""
    try:
        from pydantic_core import PydanticSerializationError, to_json
    except ImportError:
        return _encode_json

    def encode(event: dict[str, Any]) -> bytes:
        try:
            line = to_json(event, fallback=str)
        except PydanticSerializationError:  # lone surrogates, which json escapes
            return _encode_json(event)
        if line.isascii() or not any(b in line for b in _LINE_BREAKS):
            return line
        return _encode_json(event)

    return encode


class EventWriter:
    """Appends events for one component. Thread-safe; each event is one write."""

    def __init__(self, path: str | os.PathLike | None, run_id: str, component: str):
        self.path = Path(path) if path else None
        self.run_id = run_id
        self.component = component
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._encode = _encoder()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        event = {"ts": round(time.time(), 6), "run_id": self.run_id, "component": self.component, "type": type}
        event.update(fields)
        if self._fd is not None:
            line = self._encode(event) + b"\n"
            with self._lock:
                os.write(self._fd, line)
        return event

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class EventLog:
    """What a reader got from an events file: the events and how many lines it had to skip."""

    events: list[dict[str, Any]] = field(default_factory=list)
    malformed: int = 0

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") in types]


def iter_events(path: str | os.PathLike, types: frozenset[str] | None = None) -> Iterator[dict[str, Any] | None]:
    """Yield each event of a file in order, streamed; ``None`` for a malformed line (not JSON,
    not an object, or without ``ts``, ``type`` and ``component``).

    With ``types``, only events of those types, and lines that cannot hold one (the type's
    quoted name is not in them) are skipped unparsed.
    """
    # Only readers need it: writers (the gate) run in sandboxes with none of our dependencies.
    from pydantic_core import from_json

    needles = [f'"{t}"'.encode() for t in types] if types else None
    with open(path, "rb") as fh:
        for raw in fh:
            if needles is not None and not any(needle in raw for needle in needles):
                continue
            try:
                event = from_json(raw)  # pydantic's Rust parser: parsing is most of a reader's time
            except ValueError:
                event = _parse_strictly(raw)
            if type(event) is dict and "ts" in event and "type" in event and "component" in event:
                if types is None or event["type"] in types:
                    yield event
            elif raw.strip():  # blank lines are not events, nor malformed
                yield None


def _parse_strictly(raw: bytes) -> Any:
    """The standard parser decides what is malformed: pydantic's refuses a few lines it takes
    (lone surrogate escapes)."""
    try:
        return json.loads(raw.decode())
    except ValueError:
        return None


def read_events(path: str | os.PathLike) -> EventLog:
    log = EventLog()
    if not Path(path).exists():
        return log
    for event in iter_events(path):
        if event is None:
            log.malformed += 1
        else:
            log.events.append(event)
    return log
