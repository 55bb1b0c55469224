"""Helpers for the tests that run real sandboxes: a project repository, the CLI, leftovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mitmchaos.cleanup import RUN_LABEL, labelled
from mitmchaos.network import chain_name

BIN = Path(sys.executable).parent
SITE_TEXT = "hello from the stand-in\n"

PLAN = """\
name: sandbox-test
agent: {agent}
verify: {verify}
repeat: 1
faults:
  - id: egress.credential_401
    match: {{host: docs.example.test}}
probes:
  - {{id: failure_surfaced}}
  - {{id: task_success}}
abort:
  - cost_usd_above: 1
{extra_abort}stand_ins:
  - host: docs.example.test
    dir: site
"""


def podman_usable() -> str | None:
    """Why real sandboxes cannot run here, or None."""
    if os.geteuid() != 0:
        return "rootful Podman and iptables need root"
    try:
        info = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
                              capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return "podman is not installed (run `make host`)"
    if info.returncode != 0:
        return f"podman info failed: {info.stderr.strip()[-300:]}"
    return None


def require_podman() -> None:
    reason = podman_usable()
    if reason:
        pytest.skip(f"REAL PODMAN SANDBOX TESTS SKIPPED: {reason}")


def make_project(root: Path, agent: str, verify: str, extra_abort: str = "",
                 files: dict[str, str] | None = None) -> Path:
    """A git repository with a stand-in site and a plan, committed (a run needs a clean tree)."""
    root.mkdir(parents=True)
    (root / "site").mkdir()
    (root / "site" / "hello.txt").write_text(SITE_TEXT)
    (root / "plan.yaml").write_text(PLAN.format(agent=json.dumps(agent), verify=json.dumps(verify),
                                                extra_abort=extra_abort))
    for name, text in (files or {}).items():
        (root / name).write_text(text)
    git = ["git", "-C", str(root), "-c", "user.email=t@example.test", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    return root


def run_env(tmp: Path, **extra: str) -> dict[str, str]:
    """Every temporary file and process of the run names ``tmp``, which the leftover check relies on."""
    (tmp / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env.update(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", TMPDIR=str(tmp / "tmp"),
               MITMCHAOS_STATE_DIR=str(tmp / "state"), **extra)
    return env


def start_run(tmp_path: Path, agent: str, verify: str = "grep -q hello result.txt", extra_abort: str = "",
              files=None, extra_args=(), **env) -> tuple[RunProcess, Path, set[str]]:
    """A project for ``agent`` and ``mitmchaos run`` started on it; the bridges there were before, for leftovers."""
    project = make_project(tmp_path / "project", agent, verify, extra_abort, files)
    before = bridges()
    run = RunProcess(project, tmp_path, tmp_path / "report.json", run_env(tmp_path, **env), extra_args)
    return run, project, before


class RunProcess:
    """``mitmchaos run`` as a subprocess, its stderr followed line by line."""

    def __init__(self, project: Path, tmp: Path, out: Path, env: dict[str, str], extra_args=()):
        self.lines: list[str] = []
        self.stdout = b""
        cmd = [str(BIN / "mitmchaos"), "run", "plan.yaml", "--out", str(out), *extra_args]
        self.proc = subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stderr:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"never saw {text!r}; stderr:\n" + "\n".join(self.lines))

    def signal(self, sig: int = signal.SIGINT) -> None:
        self.proc.send_signal(sig)

    def finish(self, timeout: float = 180) -> int:
        self.stdout = self.proc.stdout.read()  # stderr belongs to the reader thread
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    def run_id(self) -> str | None:
        for line in self.lines:
            if line.startswith("[mitmchaos ") and "] rep " in line and "(" in line:
                return line.rsplit("(", 1)[1].rstrip(")").rsplit("-", 1)[0]
        return None


def bridges() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True,
                         text=True).stdout
    return {line.split(":")[1].strip() for line in out.splitlines()}


def run_processes(tmp: Path) -> dict[int, str]:
    """Processes of the run under ``tmp`` (its TMPDIR in their command line or environment), shown
    as name and command line. The environment finds what the fork server forked (forkserver.py):
    their command line is the server's."""
    marker = str(tmp / "tmp").encode()
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline, environ = (proc / "cmdline").read_bytes(), (proc / "environ").read_bytes()
                name = (proc / "comm").read_text().strip()
            except OSError:
                continue
            if marker in cmdline or marker in environ:
                shown = cmdline.replace(b"\0", b" ")[:200].decode(errors="replace")
                found[int(proc.name)] = f"{name}: {shown}"
    return found


def leftovers(tmp: Path, project: Path, run_id: str | None, bridges_before: set[str]) -> list[str]:
    """Everything a run could leave behind, found by listing (empty when it cleaned up)."""
    found = []
    for kind in ("container", "network"):
        found += [f"{kind} {item['name']}" for item in labelled(kind)
                  if run_id and item["labels"].get(RUN_LABEL, "").startswith(run_id)]
    for tool in ("iptables", "ip6tables"):
        rules = subprocess.run([tool, "-S"], capture_output=True, text=True).stdout.splitlines()
        chains = {chain_name(f"{run_id}-{rep}") for rep in ("b0", "f0")}
        found += [f"{tool} {r}" for r in rules if run_id and (run_id in r or any(c in r for c in chains))]
    networks = subprocess.run(["podman", "network", "ls", "--format", "{{.NetworkInterface}}"],
                              capture_output=True, text=True).stdout.split()
    found += [f"bridge {b}" for b in bridges() - bridges_before - set(networks)]
    found += [f"process {pid}: {shown}" for pid, shown in run_processes(tmp).items()]
    worktrees = subprocess.run(["git", "-C", str(project), "worktree", "list", "--porcelain"],
                               capture_output=True, text=True).stdout
    found += [f"worktree {line}" for line in worktrees.splitlines()
              if line.startswith("worktree ") and line != f"worktree {project}"]
    found += [f"temp {p}" for p in (tmp / "tmp").iterdir()] if (tmp / "tmp").exists() else []
    found += [f"ledger {p}" for p in (tmp / "state").glob("*.json")] if (tmp / "state").exists() else []
    return found
