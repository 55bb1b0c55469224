#!/usr/bin/env python3
"""The reference agent: a small tool-using loop on the official anthropic SDK.

    mitmchaos-agent "Add the tinylib package and use it in app.py"

It offers the model one tool, ``bash`` (run a shell command in the working directory),
runs what the model asks for and prints every step on stderr; the model's final answer goes
to stdout, as ``claude -p`` does, so stdout is what the agent told its user. API errors end
the run with exit code 1 and the error's text on stdout. It calls the real API host; inside
the sandbox the proxy answers (or forwards) every call.
"""

from __future__ import annotations

import os
import subprocess
import sys

import anthropic

MODEL = os.environ.get("MITMCHAOS_AGENT_MODEL", "claude-sonnet-4-6")
MAX_TURNS = int(os.environ.get("MITMCHAOS_AGENT_MAX_TURNS", "20"))
COMMAND_TIMEOUT_S = 300
OUTPUT_LIMIT = 4000  # characters of a command's output sent back to the model

BASH_TOOL = {
    "name": "bash",
    "description": "Run a shell command in the project directory and return its output and exit code.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "the command, run with bash -c"}},
        "required": ["command"],
    },
}

SYSTEM = (
    "You are a coding agent working in the current directory. Use the bash tool to do the task. "
    "When you finish, say what you did; if something failed, say exactly what failed."
)


def run_bash(command: str) -> tuple[str, bool]:
    try:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"command timed out after {COMMAND_TIMEOUT_S} s", False
    output = (done.stdout + done.stderr)[-OUTPUT_LIMIT:]
    return f"{output}\n(exit code {done.returncode})", done.returncode == 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: mitmchaos-agent TASK", file=sys.stderr)
        return 2
    client = anthropic.Anthropic(max_retries=int(os.environ.get("MITMCHAOS_AGENT_MAX_RETRIES", "2")))
    messages: list[dict] = [{"role": "user", "content": argv[1]}]
    for _turn in range(MAX_TURNS):
        try:
            with client.messages.stream(
                model=MODEL, max_tokens=4096, system=SYSTEM, tools=[BASH_TOOL], messages=messages
            ) as stream:
                reply = stream.get_final_message()
        except Exception as exc:  # the SDK's errors, and its HTTP library's own when a stream is cut mid-way
            print(f"API error: {type(exc).__name__}: {exc}")
            return 1
        messages.append(
            {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in reply.content]}
        )
        text = "\n".join(block.text.strip() for block in reply.content if block.type == "text").strip()
        calls = [block for block in reply.content if block.type == "tool_use"]
        if reply.stop_reason != "tool_use" or not calls:
            print(text, flush=True)  # the final answer
            return 0
        if text:
            print(text, file=sys.stderr, flush=True)
        results = []
        for call in calls:
            command = call.input.get("command", "")
            print(f"$ {command}", file=sys.stderr, flush=True)
            output, ok = run_bash(command)
            print(output.rstrip(), file=sys.stderr, flush=True)
            results.append(
                {"type": "tool_result", "tool_use_id": call.id, "content": output, "is_error": not ok}
            )
        messages.append({"role": "user", "content": results})
    print(f"gave up after {MAX_TURNS} turns")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
