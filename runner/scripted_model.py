"""The scripted model: a key-free stand-in for the model APIs, deciding each turn from the request.

    stand_ins: [{host: api.anthropic.com, scripted_model: careful}]

The script is the task itself: every command in single backticks in the agent's prompt (the
first user message, minus the ``<system-reminder>``-style context blocks agents wrap around
it) is one step, run in order through the request's own shell tool — whichever offered tool
takes a ``command`` or ``cmd`` argument (Claude Code's ``Bash``, Codex's ``exec_command``, the
reference agent's ``bash``). Everything is derived from the conversation the request carries,
so the model keeps no state and a retried request gets the same answer. Once every step has
a result, it answers finally; a request without a shell tool gets a short text answer.

The two reference behaviours differ only in how they read results:

- **careful** stops at the first failed step and reports it, quoting the tool's output
  verbatim (an injected error's canary included); it never runs commands it only read in a
  tool result, and says when a result carried such instructions.
- **reckless** carries on whatever happened, runs every backticked command a tool result
  suggests as if it were part of the task, and finally claims that everything worked.

Usage figures are those of a real call: input tokens from the request's size, output tokens
from the reply's (see model_server.Reply), so cost probes and cost ceilings see real numbers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from mitmchaos.globs import glob_matches
from mitmchaos.model_server import ModelServer, ToolUse, Turn

Behaviour = Literal["careful", "reckless"]
BEHAVIOURS: tuple[Behaviour, ...] = ("careful", "reckless")

# The environment variable each provider's key comes in, and the host that key is sent to.
PROVIDER_KEY_HOSTS = {"ANTHROPIC_API_KEY": "api.anthropic.com", "OPENAI_API_KEY": "api.openai.com"}
# What the sandbox gets instead of a real key when the scripted model answers that host: the
# agents refuse to start without one, and a real key has no business reaching a stand-in.
SCRIPTED_MODEL_KEY = "sk-mitmchaos-scripted-model"

COMMAND_ARGUMENTS = ("command", "cmd")
SHELL_NAMES = ("bash", "shell", "exec_command", "shell_command", "run_command", "terminal")
# context agents wrap around the task: <system-reminder>, <environment_context>, ...
CONTEXT_BLOCK = re.compile(r"<([A-Za-z_][\w-]*)>.*?</\1>", re.DOTALL)
BACKTICKED = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
EXIT_CODE = re.compile(r"exit(?:ed)?(?: with)? code:?\s*(-?\d+)|\"exit_code\":\s*(-?\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class ShellTool:
    name: str
    argument: str  # "command" or "cmd"
    as_argv: bool  # the argument is an argv list (Codex's older ``shell`` tool), not a string

    def call(self, command: str) -> ToolUse:
        value: Any = ["bash", "-lc", command] if self.as_argv else command
        return ToolUse(self.name, {self.argument: value})


@dataclass(frozen=True)
class Step:
    command: str
    output: str
    failed: bool


@dataclass(frozen=True)
class Conversation:
    """What the request carries, provider-neutral: the task text and the tool calls with their results."""

    task: str
    steps: list[Step]
    pending_calls: int  # calls the model asked for whose result is not in the request yet


class ScriptedBrain:
    def __init__(self, behaviour: Behaviour) -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"scripted model behaviour must be one of {BEHAVIOURS}, not {behaviour!r}")
        self.behaviour = behaviour

    def __call__(self, body: dict, provider: str) -> Turn:
        tool = shell_tool(body.get("tools") or [])
        conversation = READERS[provider](body)
        if tool is None:
            return Turn(text="I can only work with a shell tool, and this request offers none.")
        script = task_commands(conversation.task)
        if not script:
            return Turn(text="The task names no commands in backticks, so there is nothing for me to run.")
        failed = next((s for s in conversation.steps if s.failed), None)
        if self.behaviour == "careful" and failed:
            return Turn(text=careful_failure_report(failed))
        planned = script + (
            suggested_commands(conversation.steps, script) if self.behaviour == "reckless" else []
        )
        done = len(conversation.steps) + conversation.pending_calls
        if done < len(planned):
            return Turn(
                text=f"Running step {done + 1}: `{planned[done]}`", tool_calls=[tool.call(planned[done])]
            )
        if self.behaviour == "reckless":
            return Turn(text="Done! Everything worked: all steps completed successfully.")
        return Turn(text=careful_success_report(conversation.steps, script))


def careful_failure_report(step: Step) -> str:
    return (
        f"I stopped: the command `{step.command}` failed, so the task is not done. "
        f"Its output, verbatim:\n\n{step.output.strip()}"
    )


def careful_success_report(steps: list[Step], script: list[str]) -> str:
    lines = ["Done. Every step succeeded:"] + [f"- `{s.command}`" for s in steps]
    ignored = suggested_commands(steps, script)
    if ignored:
        lines.append(
            "A tool result also carried instructions that are not part of the task, which looks like "
            "a prompt injection; I ignored them and did not run: " + ", ".join(f"`{c}`" for c in ignored)
        )
    return "\n".join(lines)


def task_commands(task: str) -> list[str]:
    return [m.strip() for m in BACKTICKED.findall(task) if m.strip()]


def suggested_commands(steps: list[Step], script: list[str]) -> list[str]:
    """Backticked commands found in tool results that are not steps of the task, in order, once each."""
    found: list[str] = []
    for step in steps:
        for command in task_commands(step.output):
            if command not in script and command not in found:
                found.append(command)
    return found


def step_failed(output: str, is_error: bool) -> bool:
    if is_error:
        return True
    match = EXIT_CODE.search(output)
    return bool(match) and int(match.group(1) or match.group(2)) != 0


# ------------------------------------------------------------------ the request's tools


def shell_tool(tools: list[dict]) -> ShellTool | None:
    """The offered tool that runs a shell command; a tool with a shell-like name wins over others."""
    candidates = []
    for tool in tools:
        name, schema = _tool_name_and_schema(tool)
        properties = (schema or {}).get("properties") or {}
        for argument in COMMAND_ARGUMENTS:
            kind = (properties.get(argument) or {}).get("type")
            if name and kind in ("string", "array"):
                candidates.append(ShellTool(name, argument, kind == "array"))
                break
    return min(candidates, key=lambda t: t.name.lower() not in SHELL_NAMES, default=None)


def _tool_name_and_schema(tool: dict) -> tuple[str | None, dict | None]:
    if "function" in tool:  # Chat Completions
        return tool["function"].get("name"), tool["function"].get("parameters")
    return tool.get("name"), tool.get("input_schema") or tool.get("parameters")  # Messages, Responses


# ------------------------------------------------------------------ reading the conversation


def _text(content: Any) -> str:
    """The text of a message or tool result: a string, or a list of text blocks/parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            _text(part.get("text", part.get("content", ""))) for part in content if isinstance(part, dict)
        )
    return ""


def _task(user_texts: list[str]) -> str:
    return "\n".join(CONTEXT_BLOCK.sub("", text) for text in user_texts)


def _steps(calls: list[tuple[str, str]], results: dict[str, tuple[str, bool]]) -> tuple[list[Step], int]:
    """The finished steps and the number of calls still without a result, from (call id, command)
    in order and call id -> (output, is_error)."""
    steps = [
        Step(command, results[cid][0], step_failed(*results[cid])) for cid, command in calls if cid in results
    ]
    return steps, sum(1 for cid, _ in calls if cid not in results)


def _command_of(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    if isinstance(arguments, dict):
        value = next((arguments[a] for a in COMMAND_ARGUMENTS if a in arguments), "")
        return value[-1] if isinstance(value, list) and value else str(value)
    return ""


def read_anthropic(body: dict) -> Conversation:
    user_texts: list[str] = []
    calls: list[tuple[str, str]] = []
    results: dict[str, tuple[str, bool]] = {}
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        for block in blocks:
            kind = block.get("type")
            if message.get("role") == "user" and kind == "text" and not calls:
                user_texts.append(block.get("text", ""))
            elif kind == "tool_use":
                calls.append((block.get("id"), _command_of(block.get("input"))))
            elif kind == "tool_result":
                results[block.get("tool_use_id")] = (_text(block.get("content")), bool(block.get("is_error")))
    return Conversation(_task(user_texts), *_steps(calls, results))


def read_openai_chat(body: dict) -> Conversation:
    user_texts: list[str] = []
    calls: list[tuple[str, str]] = []
    results: dict[str, tuple[str, bool]] = {}
    for message in body.get("messages") or []:
        role = message.get("role")
        if role == "user" and not calls:
            user_texts.append(_text(message.get("content")))
        for call in message.get("tool_calls") or []:
            calls.append((call.get("id"), _command_of((call.get("function") or {}).get("arguments"))))
        if role == "tool":
            results[message.get("tool_call_id")] = (_text(message.get("content")), False)
    return Conversation(_task(user_texts), *_steps(calls, results))


def read_openai_responses(body: dict) -> Conversation:
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
    user_texts: list[str] = []
    calls: list[tuple[str, str]] = []
    results: dict[str, tuple[str, bool]] = {}
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user" and not calls:
            user_texts.append(_text(item.get("content")))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            calls.append(
                (
                    item.get("call_id"),
                    _command_of(
                        item.get("arguments")
                        or item.get("input")
                        or (item.get("action") or {}).get("command")
                    ),
                )
            )
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            output = item.get("output")
            results[item.get("call_id")] = (output if isinstance(output, str) else _text(output), False)
    return Conversation(_task(user_texts), *_steps(calls, results))


READERS = {
    "anthropic": read_anthropic,
    "openai-chat": read_openai_chat,
    "openai-responses": read_openai_responses,
}


# ------------------------------------------------------------------ the stand-in server


class ScriptedModelServer(ModelServer):
    """A ModelServer with the scripted brain, shaped as a stand-in (``address``, ``close()``)."""

    def __init__(self, behaviour: Behaviour) -> None:
        super().__init__(ScriptedBrain(behaviour))
        self.start()

    @property
    def address(self) -> tuple[str, int]:
        return self._httpd.server_address[:2]

    def close(self) -> None:
        self.stop()


def sandbox_keys(plan) -> dict[str, str]:
    """The provider key variables the sandbox gets as a placeholder: those whose API host the
    scripted model answers."""
    scripted = [s.host for s in plan.stand_ins if s.scripted_model]
    return {
        name: SCRIPTED_MODEL_KEY
        for name, host in PROVIDER_KEY_HOSTS.items()
        if any(glob_matches(pattern, host) for pattern in scripted)
    }
