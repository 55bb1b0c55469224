"""Shared by the egress, resolver and stand-in tests: plans, client environments, fixtures on disk."""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import zipfile
from pathlib import Path

import yaml

from mitmchaos.proxy import ChaosProxy, env_without_proxy_settings

HANDLERS = Path(__file__).with_name("standin_handlers.py")
UNUSED_FAULT = {"id": "egress.dns_fail", "match": {"host": "unused.invalid"}}


def write_plan(directory: Path, faults=(), stand_ins=(), policy=None, **extra) -> Path:
    plan = {"name": "egress-test", "agent": "true", "verify": "true", "faults": list(faults) or [UNUSED_FAULT],
            "probes": [{"id": "task_success"}], "abort": [{"cost_usd_above": 1}], "stand_ins": list(stand_ins),
            **extra}
    if policy is not None:
        plan["policy"] = policy
    path = directory / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def client_env(proxy: ChaosProxy, **extra: str) -> dict[str, str]:
    """A clean environment that sends a client through ``proxy`` and trusts its CA only."""
    return {**env_without_proxy_settings(), **proxy.env(), "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", **extra}


def run(cmd: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def write_simple_index(root: Path, name: str = "chaospkg", version: str = "1.0") -> Path:
    """A PEP 503 simple index with one pure-Python wheel, as a dir stand-in serves it."""
    wheel_name = f"{name}-{version}-py3-none-any.whl"
    wheel = _wheel(name, version)
    (root / "files").mkdir(parents=True)
    (root / "files" / wheel_name).write_bytes(wheel)
    project = root / "simple" / name
    project.mkdir(parents=True)
    digest = hashlib.sha256(wheel).hexdigest()
    (project / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="../../files/{wheel_name}#sha256={digest}">{wheel_name}</a>'
        "</body></html>\n")
    (root / "simple" / "index.html").write_text(f'<html><body><a href="{name}/">{name}</a></body></html>\n')
    return root


def _wheel(name: str, version: str) -> bytes:
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": b"VALUE = 1\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: mitmchaos-tests\nRoot-Is-Purelib: true\n"
                             b"Tag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", record)
    return buffer.getvalue()


def write_bare_repo(root: Path, name: str = "repo.git") -> Path:
    """A bare git repository with one commit, servable over git's dumb HTTP protocol from a dir."""
    work = root / "work"
    env = {**env_without_proxy_settings(), "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.test", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.test"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], env=env, check=True)
    (work / "README").write_text("served by a stand-in\n")
    subprocess.run(["git", "add", "README"], cwd=work, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "first"], cwd=work, env=env, check=True)
    bare = root / name
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], env=env, check=True)
    subprocess.run(["git", "update-server-info"], cwd=bare, env=env, check=True)
    return bare
