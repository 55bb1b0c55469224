"""Each repetition's workspace: a fresh worktree of HEAD, with the project's gates carried in.

What a project's hook setup generated is usually not committed, and what is names the
machine's paths; so the gate scripts and the project-level hook settings are copied into
the worktree (never into the project), with the project's absolute path rewritten to
/work. A file the commit already has is kept, but its paths are still rewritten.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from mitmchaos.cleanup import CleanupStack, signals_deferred
from mitmchaos.podman_driver import SANDBOX_UID

SANDBOX_ROOT = "/work"
STATE_DIR = ".mitmchaos"  # in the worktree: plan, events, gate scripts; writable by the sandbox user
GATE_DIRS = (".mitmchaos/hooks",)
HOOK_SETTINGS = (".claude/settings.json", ".claude/settings.local.json", ".codex/hooks.json",
                 ".cursor/hooks.json")


class WorkspaceError(RuntimeError):
    pass


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise WorkspaceError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def project_root(cwd: Path) -> Path:
    try:
        return Path(_git(cwd, "rev-parse", "--show-toplevel").strip())
    except WorkspaceError:
        raise WorkspaceError(f"{cwd} is not inside a git repository; a run needs one (each repetition "
                             "starts from a worktree of HEAD)") from None


def require_clean_tree(root: Path) -> None:
    dirty = _git(root, "status", "--porcelain").splitlines()
    if dirty:
        listed = "\n  ".join(dirty[:10]) + ("\n  ..." if len(dirty) > 10 else "")
        raise WorkspaceError("the git working tree is not clean; commit or stash first (every repetition "
                             f"starts from HEAD, so these changes would reach none of them):\n  {listed}")
    _git(root, "rev-parse", "--verify", "HEAD")


def create_worktree(root: Path, dest: Path, stack: CleanupStack | None) -> Path:
    """A detached worktree of HEAD; without a stack it outlives the run (--keep)."""
    with signals_deferred():
        _git(root, "worktree", "add", "--detach", str(dest), "HEAD")
        if stack is not None:
            stack.push("worktree", repo=str(root), path=str(dest))
    return dest


def carry_in(root: Path, worktree: Path) -> list[str]:
    """Copy the gates and hook settings in and rewrite the project path; returns what was touched."""
    touched = []
    for rel in GATE_DIRS:
        source = root / rel
        if source.is_dir():
            for path in sorted(p for p in source.rglob("*") if p.is_file()):
                touched += _carry_file(root, worktree, path.relative_to(root))
    for rel in HOOK_SETTINGS:
        if (root / rel).is_file() or (worktree / rel).is_file():
            touched += _carry_file(root, worktree, Path(rel))
    return touched


def _carry_file(root: Path, worktree: Path, rel: Path) -> list[str]:
    target = worktree / rel
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    try:
        text = target.read_text()
    except UnicodeDecodeError:
        return [str(rel)]
    rewritten = text.replace(str(root), SANDBOX_ROOT)
    if rewritten != text:
        target.write_text(rewritten)
    return [str(rel)]


def sandbox_git(worktree: Path) -> tuple[list[dict], dict[str, str]]:
    """Mounts and environment that make git work on /work inside the sandbox, safely.

    A worktree's ``.git`` file names the repository's git directory by its host path, so
    that directory is mounted at the same path: read-only, except the worktree's own admin
    directory (its HEAD and index). New objects go to a directory of that worktree, with the
    repository's objects as an alternate; so the agent can commit, verify sees the commit,
    and the project's repository is never written. The run's own files are git-ignored.
    """
    admin = Path((worktree / ".git").read_text().split("gitdir:", 1)[1].strip())
    common = (admin / (admin / "commondir").read_text().strip()).resolve()
    (admin / "objects").mkdir(exist_ok=True)
    (admin / "mitmchaos-exclude").write_text(f"/{STATE_DIR}/\n")
    hand_to_sandbox_user(admin)
    mounts = [{"type": "bind", "source": str(common), "target": str(common), "read_only": True},
              {"type": "bind", "source": str(admin), "target": str(admin), "read_only": False}]
    env = {"GIT_OBJECT_DIRECTORY": str(admin / "objects"),
           "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(common / "objects"),
           "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.excludesFile",
           "GIT_CONFIG_VALUE_0": str(admin / "mitmchaos-exclude")}
    return mounts, env


def hand_to_sandbox_user(worktree: Path) -> None:
    """The sandbox runs as an unprivileged uid; rootful Podman maps it 1:1, so chown on the host."""
    for dirpath, dirnames, filenames in os.walk(worktree):
        for name in (dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)):
            os.lchown(name, SANDBOX_UID, SANDBOX_UID)
