"""Tool names and inputs as the events record them."""

from __future__ import annotations

import re
from typing import Any

SECRET_KEY = re.compile(
    r"(api[_-]?key|token|secret|password|passwd|authorization|credential|cookie)", re.IGNORECASE
)
REDACTED = "[redacted]"


def tool_key(name: str | None) -> str | None:
    """The tool's name without an MCP client's prefix: ``mcp__server__tool`` and ``tool`` are one tool."""
    if name and name.startswith("mcp__"):
        parts = name.split("__", 2)
        if len(parts) == 3 and parts[2]:
            return parts[2]
    return name


def safe_input(value: Any) -> Any:
    """A tool input fit for the events file: values under secret-looking keys are replaced."""
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and SECRET_KEY.search(k) else safe_input(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [safe_input(v) for v in value]
    return value
