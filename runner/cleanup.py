"""Undo everything a run set up, in reverse order, whatever stops it.

Each resource is pushed onto a ``CleanupStack`` right after it exists: a kind and the
arguments needed to remove it (plus, optionally, a live callable that removes it more
gently from inside the run, like stopping a child process and reaping it). ``close()``
runs the stack in reverse, logging failures and going on. The stack is also written to
a ledger file, so ``mitmchaos cleanup`` can remove what a killed run (SIGKILL, a crash
of the machine) left behind.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mitmchaos.log import get_logger

log = get_logger(__name__)

RUN_LABEL = "mitmchaos.run"  # podman label on every pod, container and network a run creates
OWNER_LABEL = "mitmchaos.owner"  # the runner process that created it (see owner_tag)
OWNER_ENV = "MITMCHAOS_OWNER"  # the same, in the environment every helper process inherits
CHAIN_PREFIX = "MCX-"  # iptables chains a run creates


def state_dir() -> Path:
    return Path(os.environ.get("MITMCHAOS_STATE_DIR") or Path(tempfile.gettempdir()) / "mitmchaos-state")


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid``, so a recycled PID is never mistaken for ours."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class Interrupted(BaseException):
    """SIGINT or SIGTERM: unwind through every cleanup, then stop."""


_deferral = {"depth": 0, "pending": None}


@contextmanager
def interrupts_raise() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into ``Interrupted`` so every ``finally`` runs."""
    def handler(signum, _frame):
        name = signal.Signals(signum).name
        if _deferral["depth"]:
            _deferral["pending"] = name
        else:
            raise Interrupted(name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold an interrupt until the block is done, then raise it.

    Around cleanup, so it runs to the end, and around "create, then push its undo", so an
    interrupt cannot fall between the two and leak the resource. Held in Python, not with a
    signal mask: a process started inside the block would inherit the mask and ignore SIGTERM.
    Python runs signal handlers in the main thread only, so a worker thread (parallel
    repetitions) has nothing to hold; counting it would make the main thread's interrupt wait
    for a worker's block and then surface in the worker.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferral["depth"] += 1
    try:
        yield
    finally:
        _deferral["depth"] -= 1
        pending = _deferral["pending"]
        if pending and not _deferral["depth"]:
            _deferral["pending"] = None
            raise Interrupted(pending)


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


def _undo_pod(name: str) -> None:
    _quiet(["podman", "pod", "rm", "--force", "--time", "1", name])


def _undo_network(name: str) -> None:
    _quiet(["podman", "network", "rm", "--force", name])


def _undo_bridge(name: str) -> None:
    if Path(f"/sys/class/net/{name}").exists():
        _quiet(["ip", "link", "del", name])


def _undo_rule(family: str, table_args: list[str]) -> bool:
    """Delete every copy (in case a rule was inserted twice); whether there was one."""
    deleted = False
    while _quiet([_iptables(family), "-w", "-D", *table_args]) == 0:
        deleted = True
    return deleted


def _undo_chain(family: str, name: str) -> None:
    _quiet([_iptables(family), "-w", "-F", name])
    _quiet([_iptables(family), "-w", "-X", name])


def _undo_firewall(family: str, rules: list[list[str]], chain: str | None) -> None:
    """A repetition's rules and the chain they jump to, in one atomic batch; one by one when the
    batch fails (something of it is gone already)."""
    lines = [f"-D {' '.join(rule)}" for rule in rules] + ([f"-F {chain}", f"-X {chain}"] if chain else [])
    if iptables_restore(family, lines).returncode == 0:
        return
    for rule in rules:
        _undo_rule(family, rule)
    if chain:
        _undo_chain(family, chain)


def iptables_restore(family: str, lines: list[str]) -> subprocess.CompletedProcess:
    """Apply ``lines`` (iptables arguments, no value with spaces) to the filter table, all or none.

    One process for what took one per rule (~20 ms each to delete)."""
    script = "\n".join(["*filter", *lines, "COMMIT", ""])
    return subprocess.run([f"{_iptables(family)}-restore", "-w", "--noflush"], input=script, text=True,
                          capture_output=True)


def _undo_worktree(repo: str, path: str) -> None:
    _quiet(["git", "-C", repo, "worktree", "remove", "--force", path])
    shutil.rmtree(path, ignore_errors=True)
    _quiet(["git", "-C", repo, "worktree", "prune"])


def _undo_path(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


UNDO: dict[str, Callable[..., None]] = {
    "process": _undo_process, "container": _undo_container, "pod": _undo_pod, "network": _undo_network,
    "bridge": _undo_bridge, "rule": _undo_rule, "chain": _undo_chain, "firewall": _undo_firewall,
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
    background: _Background | None = field(default=None, repr=False)  # started by release_soon

    def run(self) -> None:
        if self.background is not None:
            self.background.wait()
        else:
            self.perform()

    def perform(self) -> None:
        if self.live is not None:
            self.live()
        else:
            UNDO[self.kind](**self.args)


class _Background:
    """A callable running in a thread of its own; ``wait`` re-raises what it raised."""

    def __init__(self, work: Callable[[], Any]):
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self.thread.start()

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - handed to wait()
            self.error = exc

    def wait(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


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

    def release_soon(self, undo: Undo) -> None:
        """Start undoing one entry in the background: a removal nothing that follows waits for.

        The entry stays on the stack (and in the ledger) until ``release`` or ``close`` reaches
        it and waits for it there, so the order of undoing holds.
        """
        if undo in self.entries and undo.background is None:
            undo.background = _Background(undo.perform)

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


def terminate(process: subprocess.Popen | None, timeout: float = 10.0) -> int | None:
    """Stop a child: SIGTERM, then SIGKILL after ``timeout``; reaped either way. Its exit status."""
    if process is None or process.poll() is not None:
        return process.returncode if process else None
    process.terminate()
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        # what it had not flushed (events, flows) is lost: worth a line in the run's log
        log.warning("a helper ignored SIGTERM and was killed", pid=process.pid, helper=_name_of(process.pid),
                    after_s=timeout)
        process.kill()
        return process.wait()


def _name_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def spawn(stack: CleanupStack, start: Callable[[], subprocess.Popen]) -> tuple[subprocess.Popen, Undo]:
    """Start a helper process (``start()`` does), registered on ``stack`` before it exists.

    ``start`` must put it in a session of its own, so a Ctrl-C at the terminal reaches the
    runner alone and the helper is stopped by the cleanup, in order.
    """
    started: list[subprocess.Popen] = []
    with signals_deferred():
        undo = stack.push("process", live=lambda: terminate(started[0] if started else None),
                          pid=None, start_time=None)
        process = start()
        started.append(process)
        stack.update(undo, pid=process.pid, start_time=process_start_time(process.pid))
    return process, undo


def popen(cmd: list[str], **popen_args: Any) -> Callable[[], subprocess.Popen]:
    """What ``spawn`` starts for a command run as is: stdin closed, in a session of its own."""
    return lambda: subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, **popen_args)


def exec_helper(cmd: list[str], log_path: Path, **popen_args: Any) -> subprocess.Popen:
    """A helper in a fresh interpreter and a session of its own, its output appended to ``log_path``.

    The runner's fork server (forkserver.py) launches the same way, minus the imports.
    """
    with open(log_path, "ab") as log:
        return popen(cmd, stdout=log, stderr=subprocess.STDOUT, **popen_args)()


# ------------------------------------------------------------------ sweeping after a killed run


def _ledger_alive(data: dict) -> bool:
    return process_start_time(data["pid"]) == data.get("start_time")


def sweep(force: bool = False) -> list[str]:
    """Undo what runs that are no longer alive left behind; returns what was removed.

    First, by label and comment, whatever any run on this machine left whose owning process
    is gone (so a run with another state directory, still going, is left alone); then the
    ledgers in the state directory; then helper processes. Labels go first because a run
    killed between creating a container and writing it to its ledger leaves one that only
    its label names. Every undo step is idempotent, so an object named by both is fine.
    """
    removed = _sweep_labelled(force)
    for ledger in sorted(state_dir().glob("*.json")) if state_dir().exists() else []:
        try:
            data = json.loads(ledger.read_text())
        except (OSError, ValueError):
            continue
        if not force and _alive(data["pid"], data.get("start_time")):
            continue
        for entry in reversed(data["undo"]):
            UNDO[entry["kind"]](**entry["args"])
            removed.append(f"{entry['kind']} {entry['args']}")
        ledger.unlink(missing_ok=True)
    return removed + _sweep_helpers(force)


def mark_helpers() -> None:
    """Name this run in the environment, so every helper it starts can be found after a crash."""
    os.environ[OWNER_ENV] = owner_tag()


def _sweep_helpers(force: bool) -> list[str]:
    """Helper processes (proxy, resolver, Podman service) whose run is gone."""
    removed = []
    marker = f"{OWNER_ENV}=".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        owner = next((v[len(marker):].decode() for v in environ if v.startswith(marker)), None)
        if owner is None or owner == owner_tag() or (not force and _owner_alive(owner)):
            continue
        pid = int(proc.name)
        _undo_process(pid, process_start_time(pid))
        removed.append(f"process {pid}")
    return removed


def _alive(pid: int, start_time: str | None) -> bool:
    return process_start_time(pid) == start_time


def owner_tag() -> str:
    """This process, as labels and rule comments name their owner: PID and kernel start time."""
    return f"{os.getpid()}.{process_start_time(os.getpid())}"


def _owner_alive(tag: str) -> bool:
    pid, _, start = tag.partition(".")
    return pid.isdigit() and _alive(int(pid), start)


def resource_labels(run_id: str) -> dict[str, str]:
    return {RUN_LABEL: run_id, OWNER_LABEL: owner_tag()}


def rule_comment(run_id: str) -> str:
    return f"{RUN_LABEL}={run_id}@{owner_tag()}"


def labelled(kind: str) -> list[dict[str, Any]]:
    """Our podman pods, containers or networks: ``name``, ``labels`` and, for a network, its ``bridge``."""
    cmd = {"pod": ["podman", "pod", "ps"], "container": ["podman", "ps", "-a"],
           "network": ["podman", "network", "ls"]}[kind]
    out = subprocess.run([*cmd, "--filter", f"label={RUN_LABEL}", "--format", "json"], capture_output=True,
                         text=True).stdout
    found = []
    for item in json.loads(out or "[]"):
        if kind == "pod":
            found.append({"name": item["Name"], "labels": item.get("Labels") or {}})
        elif kind == "container":
            found.append({"name": item["Names"][0], "labels": item.get("Labels") or {}})
        else:
            found.append({"name": item["name"], "labels": item.get("labels") or {},
                          "bridge": item.get("network_interface")})
    return found


def _sweep_labelled(force: bool) -> list[str]:
    removed = []
    for kind in ("pod", "container", "network"):  # a pod's containers go with it
        for item in labelled(kind):
            if force or not _owner_alive(item["labels"].get(OWNER_LABEL, "")):
                UNDO[kind](item["name"])
                if item.get("bridge"):
                    _undo_bridge(item["bridge"])  # we created it; netavark may not have removed it
                removed.append(f"{kind} {item['name']}")
    for family in ("ipv4", "ipv6"):
        removed += _sweep_rules(family, force)
    return removed


def _sweep_rules(family: str, force: bool) -> list[str]:
    removed = []
    for rule in subprocess.run([_iptables(family), "-S"], capture_output=True, text=True).stdout.splitlines():
        parts = shlex.split(rule)  # -S quotes comments
        owner = _comment_owner(parts)
        if (parts[:1] == ["-A"] and owner is not None and (force or not _owner_alive(owner))
                and _undo_rule(family, parts[1:])):
            removed.append(f"rule {family} {rule[3:]}")
    # a run's chain is referenced only by its own INPUT rule: unreferenced, it is left over
    listing = subprocess.run([_iptables(family), "-n", "-L"], capture_output=True, text=True).stdout
    for chain in re.findall(rf"^Chain ({re.escape(CHAIN_PREFIX)}\S+) \(0 references\)", listing, re.M):
        _undo_chain(family, chain)
        removed.append(f"chain {family} {chain}")
    return removed


def _comment_owner(parts: list[str]) -> str | None:
    for i, part in enumerate(parts[:-1]):
        if part == "--comment":
            value = parts[i + 1]
            if value.startswith(RUN_LABEL + "=") and "@" in value:
                return value.rsplit("@", 1)[1]
    return None
