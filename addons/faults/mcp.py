"""mcp.*: faults on an MCP server's tool list."""

from __future__ import annotations

from typing import Any

from mitmchaos.addons.faults import FaultOptions, FaultType, register
from pydantic import BaseModel, ConfigDict, Field, model_validator


class ToolRedefinition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str | None = None
    input_schema: dict[str, Any] | None = Field(None, alias="inputSchema")


class ToolsetChangeOptions(FaultOptions):
    remove: list[str] = Field(default_factory=list, description="tool names that disappear")
    redefine: dict[str, ToolRedefinition] = Field(
        default_factory=dict, description="tools whose definition changes"
    )
    notify: bool = Field(True, description="send notifications/tools/list_changed where the session allows")

    @model_validator(mode="after")
    def _changes_something(self):
        if not self.remove and not self.redefine:
            raise ValueError("name at least one tool in remove or redefine")
        return self


register(
    FaultType(
        "mcp.toolset_change",
        ToolsetChangeOptions,
        ("mcp",),
        "mutating",
        "tools disappear or are redefined mid-session",
    )
)


def change_toolset(tools: list[dict[str, Any]], opts: ToolsetChangeOptions) -> list[dict[str, Any]]:
    """A tools/list result's tools after the change: removed tools gone, redefined ones rewritten."""
    changed = []
    for tool in tools:
        name = tool.get("name")
        if name in opts.remove:
            continue
        redefinition = opts.redefine.get(name)
        if redefinition is not None:
            tool = {**tool, **redefinition.model_dump(by_alias=True, exclude_none=True)}
        changed.append(tool)
    return changed
