"""Incremental parser for server-sent events: feed bytes as they arrive, get whole events back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_TERMINATORS = (b"\r\n\r\n", b"\n\n", b"\r\r")


@dataclass(frozen=True)
class SSEEvent:
    event: str  # "message" when the block has no event: line
    data: str

    def json(self) -> Any:
        """The data as JSON, or None (``[DONE]``, a partial or malformed payload)."""
        try:
            return json.loads(self.data)
        except ValueError:
            return None


class SSEParser:
    """Keeps the bytes of an unfinished event between chunks; never holds more than one event."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[SSEEvent, int]]:
        """The events completed by ``chunk``, each with the offset in ``chunk`` just past its end."""
        held = len(self._pending)
        self._pending += chunk
        found: list[tuple[SSEEvent, int]] = []
        start = 0
        while True:
            end, size = _next_terminator(self._pending, start)
            if end < 0:
                break
            event = _parse_block(bytes(self._pending[start:end]))
            start = end + size
            if event is not None:
                found.append((event, start - held))
        del self._pending[:start]
        return found


def _next_terminator(buf: bytearray, start: int) -> tuple[int, int]:
    hits = [(i, len(t)) for t in _TERMINATORS if (i := buf.find(t, start)) >= 0]
    return min(hits) if hits else (-1, 0)


def _parse_block(block: bytes) -> SSEEvent | None:
    name, data = "message", []
    for line in block.decode("utf-8", "replace").splitlines():
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return SSEEvent(name, "\n".join(data)) if data else None  # comments and keep-alives carry no data
