"""The sandbox pieces: images, abort monitor, workspaces, cleanup; and escapes from a real sandbox."""

from __future__ import annotations

import json
import secrets
import signal
import socket
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import structlog
from podman.errors import APIError

from mitmchaos import images
from mitmchaos.cleanup import (CleanupStack, owner_tag, process_start_time, rule_comment, state_dir, sweep,
                               terminate)
from mitmchaos.monitor import AbortMonitor
from mitmchaos.network import SandboxNetwork, apply_firewall, chain_name
from mitmchaos.plan import parse_plan_text
from mitmchaos.podman_driver import START_CHECKS, ContainerSpec, SandboxError, _start, connect, run_container
from mitmchaos.run import mask_secrets
from mitmchaos.workspace import carry_in, create_worktree
from tests.sandboxed import RunProcess, bridges, leftovers, make_project, require_podman, run_env

PLAN = """\
name: t
agent: "true"
verify: "true"
faults: [{id: llm.rate_limit}]
probes: [{id: task_success}]
abort:
  - destructive_attempt
  - cost_usd_above: 1.5
  - wall_clock_s_above: 30
"""


# ------------------------------------------------------------------ images


def test_debian_mirror_is_read_from_apt_config(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example.test/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example.test/debian\n"
        "Suites: bookworm bookworm-updates\n")
    assert images.debian_mirror(tmp_path) == "http://mirror.example.test/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://old.example.test/debian bookworm main\n")
    assert images.debian_mirror(tmp_path) == "http://old.example.test/debian"
    (tmp_path / "sources.list").write_text("")
    assert images.debian_mirror(tmp_path) is None


def test_only_our_own_images_are_built_on_demand(monkeypatch):
    monkeypatch.setattr(images, "image_exists", lambda tag: False)
    with pytest.raises(images.ImageError, match="does not exist; build it first"):
        images.ensure_image("my-agent-sandbox")


# ------------------------------------------------------------------ abort monitor


def write_events(path: Path, *events: dict, partial: str = "") -> None:
    with open(path, "a") as fh:
        for event in events:
            fh.write(json.dumps({"ts": 1, "run_id": "r", "component": "proxy", **event}) + "\n")
        fh.write(partial)


def test_abort_monitor_sums_cost_and_waits_for_whole_lines(tmp_path):
    events = tmp_path / "events.jsonl"
    monitor = AbortMonitor(parse_plan_text(PLAN), events)
    assert monitor.check(1) is None  # no file yet
    write_events(events, {"type": "llm_call", "cost_usd": 1.0}, {"type": "fault_injected"},
                 partial='{"type": "llm')
    assert monitor.check(1) is None and monitor.faults_fired == 1
    with open(events, "a") as fh:
        fh.write('_call", "cost_usd": 0.6, "ts": 1, "component": "proxy"}\nnot json\n')
    assert monitor.check(1) == {"condition": "cost_usd_above", "value": 1.5, "observed": 1.6}


def test_abort_monitor_destructive_and_wall_clock(tmp_path):
    events = tmp_path / "events.jsonl"
    monitor = AbortMonitor(parse_plan_text(PLAN), events)
    assert monitor.check(31)["condition"] == "wall_clock_s_above"
    write_events(events, {"type": "decision", "kind": "policy", "action": "block"})
    assert AbortMonitor(parse_plan_text(PLAN), events).check(1) is None
    write_events(events, {"type": "decision", "kind": "destructive", "action": "allow", "tool": "Bash"})
    found = AbortMonitor(parse_plan_text(PLAN), events).check(1)
    assert found == {"condition": "destructive_attempt", "value": None,
                     "observed": {"action": "allow", "tool": "Bash"}}
    without = parse_plan_text(PLAN.replace("  - destructive_attempt\n", ""))
    assert AbortMonitor(without, events).check(1) is None


# ------------------------------------------------------------------ workspace and secrets


def test_gates_and_hook_settings_are_carried_in_with_paths_rewritten(tmp_path):
    project = tmp_path / "project"
    committed = '{"hooks": {"PreToolUse": [{"command": "node %s/.mitmchaos/hooks/gate.js"}]}}'
    make_project(project, "true", "true", files={})
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(committed % "/elsewhere")
    subprocess.run(["git", "-C", str(project), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(project), "-c", "user.email=t@t", "-c", "user.name=t",
                    "commit", "-qm", "s"], check=True)
    # what a hook setup generated locally: not committed, names this machine's path
    (project / ".claude" / "settings.json").write_text(committed % project)  # the committed copy wins
    (project / ".claude" / "settings.local.json").write_text(committed % project)
    (project / ".mitmchaos" / "hooks").mkdir(parents=True)
    (project / ".mitmchaos" / "hooks" / "gate.js").write_text(f"// lives in {project}\n")
    stack = CleanupStack(f"test-{secrets.token_hex(3)}")
    try:
        worktree = create_worktree(project, tmp_path / "wt", stack)
        touched = carry_in(project, worktree)
        assert touched == [".mitmchaos/hooks/gate.js", ".claude/settings.json", ".claude/settings.local.json"]
        assert (worktree / ".claude" / "settings.local.json").read_text() == committed % "/work"
        assert (worktree / ".claude" / "settings.json").read_text() == committed % "/elsewhere"
        assert (worktree / ".mitmchaos" / "hooks" / "gate.js").read_text() == "// lives in /work\n"
        # the project itself is untouched
        assert (project / ".claude" / "settings.local.json").read_text() == committed % project
    finally:
        stack.close()
    assert not (tmp_path / "wt").exists()
    assert "wt" not in subprocess.run(["git", "-C", str(project), "worktree", "list"], capture_output=True,
                                      text=True).stdout


def test_secrets_are_masked_in_every_artifact_keeping_lengths(tmp_path):
    key = "sk-ant-FAKE-0123456789"
    (tmp_path / "agent.out").write_text(f"my key is {key}\n")
    (tmp_path / "flows.mitm").write_bytes(b"12:" + key.encode() + b",")
    mask_secrets(tmp_path, [key, "short"])
    assert (tmp_path / "agent.out").read_text() == f"my key is {'*' * len(key)}\n"
    assert (tmp_path / "flows.mitm").read_bytes() == b"12:" + b"*" * len(key) + b","


# ------------------------------------------------------------------ cleanup


def test_a_background_release_is_waited_for_in_its_turn(tmp_path, monkeypatch):
    monkeypatch.setenv("MITMCHAOS_STATE_DIR", str(tmp_path / "state"))
    order, slow = [], threading.Event()
    stack = CleanupStack("run-bg")
    stack.push("path", live=lambda: order.append("older"), path="unused")
    background = stack.push("path", live=lambda: (slow.wait(5), order.append("background")), path="unused")
    stack.push("path", live=lambda: order.append("newer"), path="unused")
    stack.release_soon(background)
    assert len(json.loads(stack.ledger.read_text())["undo"]) == 3  # in the ledger until done
    slow.set()
    assert stack.close() == []
    assert order == ["newer", "background", "older"]


def test_a_firewall_comes_out_whole_even_with_a_rule_already_gone(tmp_path, monkeypatch):
    monkeypatch.setenv("MITMCHAOS_STATE_DIR", str(tmp_path / "state"))
    rep = f"fw-{secrets.token_hex(3)}"
    net = SandboxNetwork("unused", "10.89.251.0/24", "10.89.251.1", f"mcxt{secrets.token_hex(3)}")
    stack = CleanupStack(rep)
    apply_firewall(net, 8080, rep, stack)
    listed = {family: subprocess.run([tool, "-S"], capture_output=True, text=True).stdout
              for family, tool in (("ipv4", "iptables"), ("ipv6", "ip6tables"))}
    assert listed["ipv4"].count(net.bridge) == 3 and f"-N {chain_name(rep)}" in listed["ipv4"]
    assert listed["ipv6"].count(net.bridge) == 2
    subprocess.run(["iptables", "-w", "-D", "FORWARD", "-i", net.bridge, "-m", "comment", "--comment",
                    rule_comment(rep), "-j", "REJECT"], check=True)  # the batch undo now fails: one by one
    assert stack.close() == []
    for tool in ("iptables", "ip6tables"):
        rules = subprocess.run([tool, "-S"], capture_output=True, text=True).stdout
        assert net.bridge not in rules and chain_name(rep) not in rules


def test_cleanup_stack_undoes_in_reverse_and_a_sweep_finishes_a_killed_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MITMCHAOS_STATE_DIR", str(tmp_path / "state"))
    order = []
    stack = CleanupStack("run-a")
    stack.push("path", live=lambda: order.append("first"), path="unused")
    stack.push("path", live=lambda: order.append("second"), path="unused")
    assert len(json.loads(stack.ledger.read_text())["undo"]) == 2
    stack.close()
    assert order == ["second", "first"] and not stack.ledger.exists()

    # a run killed with SIGKILL: its ledger names a process and a directory, its owner is gone
    sleeper = subprocess.Popen(["sleep", "300"])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    ledger = state_dir() / "run-b.json"
    ledger.write_text(json.dumps({"run_id": "run-b", "pid": dead.pid, "start_time": "0", "undo": [
        {"kind": "path", "args": {"path": str(scratch)}},
        {"kind": "process", "args": {"pid": sleeper.pid, "start_time": process_start_time(sleeper.pid)}}]}))
    live = CleanupStack("run-c")  # a run still going: left alone
    live.push("path", path=str(tmp_path / "keep"))
    try:
        removed = sweep()
        assert sleeper.wait(timeout=10) != 0
        assert not scratch.exists() and not ledger.exists() and live.ledger.exists()
        assert any(line.startswith("process") for line in removed)
    finally:
        live.close()
        if sleeper.poll() is None:
            sleeper.kill()


# ------------------------------------------------------------------ escapes from a real sandbox

PROBE = r"""#!/bin/sh
# Each escape attempt prints BLOCKED or OPEN; the controls print CONTROL-OK or CONTROL-FAILED.
gw=$(echo "$HTTPS_PROXY" | sed -E 's#^http://([^:/]+):.*#\1#')
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "OPEN $name"; else echo "BLOCKED $name"; fi; }
ctl() { name=$1; shift
  if "$@" >/dev/null 2>&1; then echo "CONTROL-OK $name"; else echo "CONTROL-FAILED $name"; fi; }
ctl proxy curl -sSf -m 10 https://docs.example.test/hello.txt
ctl resolver sh -c "getent hosts anything.test | grep -q $gw"
try host-loopback curl -sS --noproxy '*' -m 3 "http://127.0.0.1:$1/"
try bridge-other-port curl -sS --noproxy '*' -m 3 "http://$gw:$2/"
try direct-https curl -sS --noproxy '*' -m 3 https://docs.example.test/hello.txt
try other-container curl -sS --noproxy '*' -m 3 "http://$4:8000/"
try ipv6-address sh -c 'test -s /proc/net/if_inet6'
try ipv6-link-local python3 -c "import socket; socket.create_connection(('fe80::1%eth0', $2), timeout=3)"
try raw-socket python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"
try other-dns-server python3 -c "
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.connect(('$gw', $3))
s.send(b'query'); sys.exit(0 if s.recv(100) else 1)"
try public-dns python3 -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.connect(('8.8.8.8', 53))
s.send(b'x'); s.recv(10)"
try become-root sh -c 'test "$(id -u)" = 0'
try capabilities sh -c 'grep CapEff /proc/self/status | grep -qv 0000000000000000'
try firewall-flush sh -c 'iptables -F 2>/dev/null'
"""

ESCAPES = ["host-loopback", "bridge-other-port", "direct-https", "other-container", "ipv6-address",
           "ipv6-link-local", "raw-socket", "other-dns-server", "public-dns",
           "become-root", "capabilities", "firewall-flush"]


class _Answer(socketserver.BaseRequestHandler):
    def handle(self):
        if isinstance(self.request, tuple):  # UDP
            data, sock = self.request
            sock.sendto(b"reply:" + data, self.client_address)
        else:
            self.request.sendall(b"HTTP/1.0 200 OK\r\n\r\nhost service reached\n")


class _V6TCP(socketserver.ThreadingTCPServer):
    address_family = socket.AF_INET6

    def server_bind(self):
        # the IPv4 server has the same port
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()


@pytest.fixture
def host_services():
    """Host services a sandbox must not reach: loopback, every IPv4 address, every IPv6 address, a UDP one."""
    servers = [socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Answer),
               socketserver.ThreadingTCPServer(("0.0.0.0", 0), _Answer),
               socketserver.ThreadingUDPServer(("0.0.0.0", 0), _Answer)]
    # the same port on [::], for the link-local attempt
    v6 = _V6TCP(("::", servers[1].server_address[1]), _Answer)
    for server in (*servers, v6):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.create_connection(("127.0.0.1", servers[1].server_address[1]), timeout=3) as s:
        assert b"host service reached" in s.recv(100)  # the control: they do answer
    yield [s.server_address[1] for s in servers]
    for server in (*servers, v6):
        server.shutdown()
        server.server_close()


@pytest.fixture
def other_container():
    """A container on another network of ours, serving on :8000."""
    require_podman()
    image = images.ensure_image(images.default_image())
    tag = secrets.token_hex(4)
    net, name = f"mitmchaos-test-{tag}", f"mitmchaos-test-target-{tag}"
    label = ["--label", "mitmchaos.test=escape"]
    subprocess.run(["podman", "network", "create", "--internal", *label, net], check=True,
                   capture_output=True)
    try:
        subprocess.run(["podman", "run", "-d", "--name", name, *label, "--network", net, image,
                        "python3", "-m", "http.server", "8000"], check=True, capture_output=True)
        address = subprocess.run(["podman", "inspect", name, "--format",
                                  "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        yield address
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True)
        subprocess.run(["podman", "network", "rm", "-f", net], capture_output=True)


@pytest.mark.podman
@pytest.mark.slow
def test_escape_attempts_from_the_sandbox_all_fail(tmp_path, host_services, other_container):
    loopback_port, any_port, udp_port = host_services
    project = make_project(tmp_path / "project", f"sh probe.sh {loopback_port} {any_port} {udp_port} "
                                                 f"{other_container}", "true", files={"probe.sh": PROBE})
    before = bridges()
    run = RunProcess(project, tmp_path, tmp_path / "report.json", run_env(tmp_path))
    run.finish()
    agent_out = tmp_path / "report" / "baseline-1" / "agent.out"
    assert agent_out.exists(), run.stderr
    out = agent_out.read_text()
    assert "CONTROL-OK proxy" in out and "CONTROL-OK resolver" in out, out
    for escape in ESCAPES:
        assert f"BLOCKED {escape}\n" in out, f"{escape} was not blocked:\n{out}"
    assert "OPEN" not in out
    assert leftovers(tmp_path, project, run.run_id(), before) == []


@pytest.mark.podman
def test_the_node_image_has_node_and_npm_and_the_same_unprivileged_user():
    require_podman()
    image = images.ensure_image(images.default_image(node=True))
    out = subprocess.run(["podman", "run", "--rm", "--network", "none", image, "sh", "-c",
                          "id -u; node --version; npm --version; echo $HOME; touch $HOME/x"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    uid, node, npm, home = out.stdout.split()
    assert uid == "1000" and node.startswith("v") and npm[0].isdigit() and home == "/home/agent"


@pytest.mark.podman
def test_a_missing_sandbox_image_stops_the_run_before_anything_starts(tmp_path):
    require_podman()
    project = make_project(tmp_path / "project", "true", "true")
    before = bridges()
    result = subprocess.run(["mitmchaos", "run", "plan.yaml", "--sandbox-image", "localhost/no-such-image:1"],
                            cwd=project, env=run_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "no-such-image" in result.stderr and "does not exist" in result.stderr
    assert leftovers(tmp_path, project, "no-run-started", before) == []


def test_a_sweep_finds_helpers_of_a_dead_run_by_their_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MITMCHAOS_STATE_DIR", str(tmp_path / "state"))  # no ledger at all
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = subprocess.Popen(["sleep", "300"], env={"MITMCHAOS_OWNER": f"{dead.pid}.0"})
    alive = subprocess.Popen(["sleep", "300"], env={"MITMCHAOS_OWNER": owner_tag()})
    try:
        removed = sweep()
        assert orphan.wait(timeout=10) != 0 and f"process {orphan.pid}" in removed
        assert alive.poll() is None  # its run (this process) is still going
    finally:
        for process in (orphan, alive):
            if process.poll() is None:
                process.kill()


# ------------------------------------------------------------------ starting a container


class _Container:
    """What run_container's start step asks of a podman-py container, answering as scripted."""

    def __init__(self, start_error: str | None, started_at: str, reload_errors: int = 0):
        self.start_error, self.reload_errors = start_error, reload_errors
        self.started_at = started_at
        self.attrs: dict = {}

    def start(self) -> None:
        if self.start_error:
            raise APIError(self.start_error)

    def reload(self) -> None:
        if self.reload_errors:
            self.reload_errors -= 1
            raise APIError("500 Server Error: container state improper")
        self.attrs = {"State": {"Status": "exited", "StartedAt": self.started_at, "Error": ""}}


EXITED_AT_ONCE = "500 Server Error: Internal Server Error (read /proc/14003/cgroup: no such process)"


def test_a_start_answered_with_an_error_counts_when_the_command_ran():
    # seen on Podman 4.3 with `true` as the verify command, once in about 160 repetitions
    _start(_Container(EXITED_AT_ONCE, "2026-11-30T17:07:59.1Z", reload_errors=2))


def test_a_container_that_never_started_is_a_sandbox_error():
    with pytest.raises(SandboxError, match="did not start: .*no such process"):
        _start(_Container(EXITED_AT_ONCE, "0001-01-01T00:00:00Z"))
    with pytest.raises(SandboxError, match="did not start: no start recorded"):
        _start(_Container(None, "0001-01-01T00:00:00Z"))
    with pytest.raises(SandboxError, match="did not start: 500"):
        _start(_Container(None, "", reload_errors=START_CHECKS))


@pytest.mark.podman
def test_a_command_that_cannot_run_is_reported_and_its_container_removed():
    require_podman()
    stack = CleanupStack(f"test-{secrets.token_hex(3)}")
    try:
        client = connect(stack)
        image = images.default_image()
        images.ensure_image(image)
        label = {"mitmchaos.test": secrets.token_hex(4)}
        spec = ContainerSpec(image=image, command=["/no/such/program"], name=None, network="none", labels=label)
        with pytest.raises(SandboxError, match="did not start"):
            run_container(client, spec, stack=None)
        assert run_container(client, ContainerSpec(image=image, command=["true"], name=None, network="none",
                                                   labels=label), stack=None).exit_code == 0
        assert client.containers.list(all=True, filters={"label": [f"mitmchaos.test={label['mitmchaos.test']}"]}) == []
    finally:
        stack.close()


def test_a_helper_that_ignores_sigterm_is_killed_and_said_so():
    program = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint(flush=True)\ntime.sleep(60)"
    ignores = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE)
    ignores.stdout.readline()  # SIGTERM is ignored from here on
    with structlog.testing.capture_logs() as logs:
        assert terminate(ignores, timeout=0.3) == -signal.SIGKILL
    assert [e["event"] for e in logs] == ["a helper ignored SIGTERM and was killed"]
    assert logs[0]["pid"] == ignores.pid and logs[0]["helper"] != "?"  # its name, from /proc
