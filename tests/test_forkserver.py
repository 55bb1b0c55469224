"""The run's fork server: helpers forked from pre-imported code behave as the programs they replace."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mitmchaos.cleanup import CleanupStack
from mitmchaos.forkserver import STATUS_LOST, ForkServer, ForkServerError
from mitmchaos.proxy import ChaosProxy, free_port

PLAN = """\
name: forked
agent: "true"
verify: "true"
faults:
  - { id: llm.rate_limit, match: { model: claude-opus-0-0 } }
probes:
  - { id: task_success }
abort:
  - cost_usd_above: 1
"""
BIN = Path(sys.executable).parent


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("MITMCHAOS_STATE_DIR", str(tmp_path / "state"))
    stack = CleanupStack("forkserver-test")
    forks = ForkServer(stack, tmp_path / "forkserver.log")
    forks.await_ready()
    yield forks
    assert stack.close() == []
    assert forks.process.returncode is not None


def test_a_forked_program_exits_as_its_console_script_would(server, tmp_path):
    log = tmp_path / "version.log"
    assert server.launch([str(BIN / "mitmchaos"), "--version"], log).wait(10) == 0
    assert "mitmchaos" in log.read_text()
    bad = server.launch([str(BIN / "mitmdump"), "--no-such-option"], tmp_path / "bad.log")
    assert bad.wait(10) == 1  # as `mitmdump --no-such-option` exits
    assert "--no-such-option" in (tmp_path / "bad.log").read_text()


def test_a_forked_proxy_serves_and_stops_as_it_would_run_alone(server, tmp_path):
    (tmp_path / "plan.yaml").write_text(PLAN)
    with ChaosProxy(tmp_path / "proxy", tmp_path / "plan.yaml", "E-CHAOS-0123abcd", "forked",
                    launch=server.launch) as proxy:  # stopped even when an assertion fails
        assert [e["component"] for e in proxy.events("plan_loaded")] == ["proxy"]
        assert Path(f"/proc/{proxy.process.pid}/comm").read_text().strip() == "mitmchaos proxy"  # ps
        assert proxy.stop() == 0  # SIGTERM: the graceful exit
    assert "listening at" in proxy.log_text()


def test_signals_and_exit_statuses_are_those_of_a_child(server, tmp_path):
    resolver = server.launch([str(BIN / "mitmchaos"), "resolver", "--plan", str(_plan(tmp_path)),
                              "--listen", f"127.0.0.1:{free_port()}"], tmp_path / "resolver.log")
    assert resolver.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        resolver.wait(0.1)
    resolver.kill()
    assert resolver.wait(10) == -signal.SIGKILL
    resolver.kill()  # collected: never signalled again (its PID may be another process's by now)


def test_a_child_outlives_a_dead_server_and_is_still_stopped(server, tmp_path):
    child = server.launch([str(BIN / "mitmchaos"), "resolver", "--plan", str(_plan(tmp_path)),
                           "--listen", f"127.0.0.1:{free_port()}"], tmp_path / "resolver.log")
    server.process.kill()
    server.process.wait()
    time.sleep(0.2)
    assert child.poll() is None  # alive: its pidfd says so, not the server's closed socket
    child.terminate()
    assert child.wait(10) == STATUS_LOST  # nobody left to report it
    with pytest.raises(ForkServerError, match="gone"):
        server.launch([str(BIN / "mitmchaos"), "--version"], tmp_path / "late.log")


def test_only_the_helpers_programs_are_forked(server, tmp_path):
    with pytest.raises(ForkServerError, match="not sh"):
        server.launch(["/bin/sh", "-c", "true"], tmp_path / "sh.log")


def test_a_child_has_the_launchers_environment_and_directory(server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MITMCHAOS_FORKSERVER_TEST", "set after the server started")
    (tmp_path / "script.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path('seen').write_text(os.environ['MITMCHAOS_FORKSERVER_TEST'] + '|' + os.getcwd())\n")
    child = server.launch([str(BIN / "mitmdump"), "--listen-port", str(free_port()), "-s", "script.py"],
                          tmp_path / "mitmdump.log")
    deadline = time.monotonic() + 10
    while not (tmp_path / "seen").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    child.terminate()
    assert child.wait(10) == 0
    assert (tmp_path / "seen").read_text() == f"set after the server started|{tmp_path}"


def _plan(tmp_path: Path) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    return path
