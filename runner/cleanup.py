"""Undo everything a run set up, in reverse order, whatever stops it.

Each resource is pushed onto a ``CleanupStack`` right after it exists: a kind and the
arguments needed to remove it (plus, optionally, a live callable that removes it more
gently from inside the run, like stopping a child process and reaping it). ``close()``
runs the stack in reverse, logging failures and going on. The stack is also written to
a ledger file, so ``mitmchaos cleanup`` can remove what a killed run (SIGKILL, a crash
of the machine) left behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mitmchaos.log import get_logger

log = get_logger(__name__)

RUN_LABEL = "mitmchaos.run"  # podman label on every container and network a run creates
CHAIN_PREFIX = "MCX-"  # iptables chains a run creates


def state_dir() -> Path:
    return Path(os.environ.get("MITMCHAOS_STATE_DIR") or Path(tempfile.gettempdir()) / "mitmchaos-state")


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid``, so a recycled PID is never mistaken for ours."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM; a pending one is delivered on the way out.

    Around cleanup, so it runs to the end, and around "create, then push its undo", so an
    interrupt cannot fall between the two and leak the resource.
    """
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# ------------------------------------------------------------------ one function per kind


def _undo_process(pid: int | None, start_time: str | None) -> None:
    if pid is None or process_start_time(pid) != start_time:
        return
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if process_start_time(pid) != start_time or _is_zombie(pid):
                return
            time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _undo_container(name: str) -> None:
    _quiet(["podman", "rm", "--force", "--time", "1", name])


def _undo_network(name: str) -> None:
    _quiet(["podman", "network", "rm", "--force", name])


def _undo_bridge(name: str) -> None:
    if Path(f"/sys/class/net/{name}").exists():
        _quiet(["ip", "link", "del", name])


def _undo_rule(family: str, table_args: list[str]) -> None:
    # delete every copy, in case a rule was inserted twice
    while _quiet([_iptables(family), "-D", *table_args]) == 0:
        pass


def _undo_chain(family: str, name: str) -> None:
    _quiet([_iptables(family), "-F", name])
    _quiet([_iptables(family), "-X", name])


def _undo_worktree(repo: str, path: str) -> None:
    _quiet(["git", "-C", repo, "worktree", "remove", "--force", path])
    shutil.rmtree(path, ignore_errors=True)
    _quiet(["git", "-C", repo, "worktree", "prune"])


def _undo_path(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


UNDO: dict[str, Callable[..., None]] = {
    "process": _undo_process, "container": _undo_container, "network": _undo_network,
    "bridge": _undo_bridge, "rule": _undo_rule, "chain": _undo_chain,
    "worktree": _undo_worktree, "path": _undo_path,
}


def _iptables(family: str) -> str:
    return {"ipv4": "iptables", "ipv6": "ip6tables"}[family]


def _quiet(cmd: list[str]) -> int:
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


# ------------------------------------------------------------------ the stack


@dataclass(eq=False)
class Undo:
    kind: str
    args: dict[str, Any]
    live: Callable[[], Any] | None = field(default=None, repr=False)

    def run(self) -> None:
        if self.live is not None:
            self.live()
        else:
            UNDO[self.kind](**self.args)


class CleanupStack:
    def __init__(self, run_id: str):
        self.run_id = run_id
        self.entries: list[Undo] = []
        state_dir().mkdir(parents=True, exist_ok=True)
        self.ledger = state_dir() / f"{run_id}.json"
        self._write()

    def push(self, kind: str, live: Callable[[], Any] | None = None, **args: Any) -> Undo:
        undo = Undo(kind, args, live)
        self.entries.append(undo)
        self._write()
        return undo

    def update(self, undo: Undo, **args: Any) -> None:
        """Fill in what was only known after the push (a process's PID)."""
        undo.args.update(args)
        self._write()

    def release(self, undo: Undo) -> None:
        """Undo one entry now (the normal end of its life)."""
        if undo in self.entries:
            self.entries.remove(undo)
            started = time.monotonic()
            try:
                undo.run()
                log.debug("cleaned up", kind=undo.kind, seconds=round(time.monotonic() - started, 3))
            finally:
                self._write()

    def close(self) -> list[str]:
        """Undo everything left, newest first; returns the failures (also logged)."""
        failures = []
        while self.entries:
            undo = self.entries.pop()
            started = time.monotonic()
            try:
                undo.run()
                log.debug("cleaned up", kind=undo.kind, seconds=round(time.monotonic() - started, 3))
            except Exception as exc:  # noqa: BLE001 - cleanup must go on
                failures.append(f"{undo.kind} {undo.args}: {exc}")
                log.error("cleanup step failed", kind=undo.kind, args=undo.args, error=str(exc))
            self._write()
        self.ledger.unlink(missing_ok=True)
        return failures

    def _write(self) -> None:
        data = {"run_id": self.run_id, "pid": os.getpid(), "start_time": process_start_time(os.getpid()),
                "undo": [{"kind": u.kind, "args": u.args} for u in self.entries]}
        tmp = self.ledger.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.ledger)


def terminate(process: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """Stop a child: SIGTERM, then SIGKILL after ``timeout``; reaped either way."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def spawn(stack: CleanupStack, cmd: list[str], **popen_args: Any) -> tuple[subprocess.Popen, Undo]:
    """Start a helper process in its own session, registered on ``stack`` before it exists.

    Signals are not held around the start (a child inherits the blocked mask and would
    ignore SIGTERM); the undo is pushed first instead, and learns the PID after.
    """
    started: list[subprocess.Popen] = []
    undo = stack.push("process", live=lambda: terminate(started[0] if started else None), pid=None, start_time=None)
    process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, **popen_args)
    started.append(process)
    stack.update(undo, pid=process.pid, start_time=process_start_time(process.pid))
    return process, undo


# ------------------------------------------------------------------ sweeping after a killed run


def _ledger_alive(data: dict) -> bool:
    return process_start_time(data["pid"]) == data.get("start_time")


def sweep(force: bool = False) -> list[str]:
    """Undo what runs that are no longer alive left behind; returns what was removed."""
    removed: list[str] = []
    live_runs: set[str] = set()
    for ledger in sorted(state_dir().glob("*.json")) if state_dir().exists() else []:
        try:
            data = json.loads(ledger.read_text())
        except (OSError, ValueError):
            continue
        if not force and _ledger_alive(data):
            live_runs.add(data["run_id"])
            continue
        for entry in reversed(data["undo"]):
            UNDO[entry["kind"]](**entry["args"])
            removed.append(f"{entry['kind']} {entry['args']}")
        ledger.unlink(missing_ok=True)
    removed += _sweep_labelled(live_runs)
    return removed


def _sweep_labelled(live_runs: set[str]) -> list[str]:
    """Containers, networks and firewall chains carrying a run label whose run is gone."""
    removed = []
    for what, list_cmd, undo in (
        ("container", ["podman", "ps", "-a"], _undo_container),
        ("network", ["podman", "network", "ls"], _undo_network),
    ):
        out = subprocess.run([*list_cmd, "--filter", f"label={RUN_LABEL}",
                              "--format", "{{.Name}}\t{{index .Labels \"" + RUN_LABEL + "\"}}"],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            name, _, run = line.partition("\t")
            if name and run not in live_runs:
                undo(name)
                removed.append(f"{what} {name}")
    for family in ("ipv4", "ipv6"):
        removed += _sweep_chains(family, live_runs)
    return removed


def _sweep_chains(family: str, live_runs: set[str]) -> list[str]:
    rules = subprocess.run([_iptables(family), "-S"], capture_output=True, text=True).stdout.splitlines()
    removed = []
    for rule in rules:
        parts = rule.split()
        run = _comment_run(parts)
        if parts[:1] == ["-A"] and run is not None and run not in live_runs:
            _undo_rule(family, parts[1:])
            removed.append(f"rule {family} {' '.join(parts[1:])}")
    for rule in rules:
        parts = rule.split()
        if (parts[:1] == ["-N"] and parts[1].startswith(CHAIN_PREFIX)
                and parts[1][len(CHAIN_PREFIX):].split("-")[0] not in {chain_tag(r) for r in live_runs}):
            _undo_chain(family, parts[1])
            removed.append(f"chain {family} {parts[1]}")
    return removed


def chain_tag(run_id: str) -> str:
    """The part of a chain name that says which run owns it (chain names have at most 28 characters)."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:8]


def rule_comment(run_id: str) -> str:
    return f"{RUN_LABEL}={run_id}"


def _comment_run(parts: list[str]) -> str | None:
    for i, part in enumerate(parts[:-1]):
        if part == "--comment":
            value = parts[i + 1].strip('"')
            if value.startswith(RUN_LABEL + "="):
                return value.split("=", 1)[1]
    return None
