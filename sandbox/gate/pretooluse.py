#!/usr/bin/env python3
"""Claude Code PreToolUse hook: the mitmchaos permission gate.

Claude Code runs it before every tool call with the call as JSON on stdin
({"session_id", "cwd", "hook_event_name", "tool_name", "tool_input", "tool_use_id", ...}).
It answers on stdout with a PreToolUse decision: "deny" with the reason the model reads, or
nothing at all (exit 0) so Claude Code's own permission rules decide, as always.
Configuration comes from MITMCHAOS_PLAN, MITMCHAOS_EVENTS, MITMCHAOS_RUN_ID,
MITMCHAOS_CANARY, MITMCHAOS_REPETITION, MITMCHAOS_SEED and MITMCHAOS_INTERLOCK
(see docs/tools.md). Installed by mitmchaos.gate.install_hook, it finds the gate's modules
beside it (the script's directory is first on sys.path): the sandbox needs only python3.
"""

import json
import sys


def main() -> int:
    try:
        call = json.load(sys.stdin)
        from mitmchaos.gate import Gate

        answer = Gate.from_env().check(
            call["tool_name"],
            call.get("tool_input", {}),
            call.get("tool_use_id"),
            workspace=call.get("cwd") or "/work",
        )
    except Exception as exc:  # noqa: BLE001  a broken gate must stop the call, not wave it through (exit 2 blocks)
        print(f"[mitmchaos] gate error, call not run: {exc!r}", file=sys.stderr)
        return 2
    if not answer.allowed:
        json.dump(
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": answer.message,
                }
            },
            sys.stdout,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
