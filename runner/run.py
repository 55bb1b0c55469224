"""``mitmchaos run``: baseline repetitions, then faulted ones, each in its own sandbox.

A repetition gets a run id and a canary, a fresh worktree of HEAD, its own internal
network and firewall, its own proxy and resolver bound on the network's gateway, and
then the agent and verify in locked-down containers. Baseline repetitions run the same
plan with every fault's probability set to 0: stand-ins and policy still answer, no fault
fires. Everything a repetition set up is undone on the way out, whatever stops it; see
cleanup.py.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TextIO

import yaml
from mitmproxy.certs import CertStore
from podman.errors import APIError

from mitmchaos import images
from mitmchaos.cleanup import Interrupted  # noqa: F401 - execute() raises it; callers catch it here
from mitmchaos.cleanup import (CleanupStack, exec_helper, interrupts_raise, mark_helpers, process_start_time,
                               resource_labels, signals_deferred, spawn)
from mitmchaos.decisions import new_canary
from mitmchaos.events import EventWriter, read_events
from mitmchaos.forkserver import ForkServer, ForkServerError
from mitmchaos.gate import gate_plan_json
from mitmchaos.log import get_logger
from mitmchaos.monitor import AbortMonitor
from mitmchaos.network import DNS_PORT, NetworkError, SandboxNetwork, apply_firewall, create_network
from mitmchaos.plan import NO_COST_CEILING, Plan, load_plan
from mitmchaos.podman_driver import (SANDBOX_UID, ContainerSpec, SandboxError, connect, read_image_file,
                                     run_container)
from mitmchaos.proxy import ChaosProxy, ProxyError, console_script, free_port
from mitmchaos.records import Phase, RepetitionRecord
from mitmchaos.scripted_model import sandbox_keys
from mitmchaos.workspace import (STATE_DIR, WorkspaceError, carry_in, create_worktree, hand_to_sandbox_user,
                                 project_root, require_clean_tree, sandbox_git)

log = get_logger(__name__)

PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # the image's bundle, replaced by one that trusts the proxy
PLAN_IN_SANDBOX = f"/work/{STATE_DIR}/plan.json"  # what gates read (python3 alone, no YAML parser)
EVENTS_IN_SANDBOX = f"/work/{STATE_DIR}/events.jsonl"
ARTIFACTS = ("events.jsonl", "agent.out", "agent.err", "verify.out", "proxy.log", "resolver.log",
             "flows.mitm")
RESOLVER_START_S = 15.0
RUN_ENDED = "stopped: another repetition ended the run"


class RunError(RuntimeError):
    """The run cannot start (preflight) or cannot go on."""


class RepetitionFailed(RuntimeError):
    """A runner-side failure that ends a repetition (and the run), reported with the repetition."""


@dataclass
class RunSettings:
    plan_path: Path
    sandbox_image: str | None = None
    out: Path | None = None
    keep: bool = False
    cwd: Path = field(default_factory=Path.cwd)
    terminal: BinaryIO = field(default_factory=lambda: sys.stdout.buffer)  # the sandbox's stdout, live
    terminal_err: BinaryIO = field(default_factory=lambda: sys.stderr.buffer)
    progress: TextIO = field(default_factory=lambda: sys.stderr)
    phases: tuple[Phase, ...] = ("baseline", "faulted")  # suites and sweeps share one baseline across runs
    workers: int = 1  # repetitions of a phase run at once (see parallel.py)
    backend: str = "podman"  # or "kube": each repetition a Pod through `podman kube play` (see kube.py)


@dataclass
class RunOutcome:
    plan_path: Path
    plan: Plan
    run_id: str
    report_path: Path
    artifacts: Path
    records: list[RepetitionRecord]
    carried_in: list[str]
    invalid_baseline: bool = False


# ------------------------------------------------------------------ progress


class Progress:
    def __init__(self, stream: TextIO, total: int):
        self.stream = stream
        self.total = total
        self.label = ""
        self.worker = ""  # ", worker 2" when repetitions run in parallel
        self.current = ""
        self.mid_line = False
        self.started = self.rep_started = self.phase_started = self.last_tick = time.monotonic()

    def repetition(self, number: int, phase: Phase, run_id: str) -> None:
        self.rep_started = time.monotonic()
        self.label = f"rep {number}/{self.total} {phase}{self.worker}"
        self.say(f"{self.label} ({run_id})")

    def phase(self, name: str) -> None:
        self.phase_started = self.last_tick = time.monotonic()
        self.say(f"{self.label}: {name}")
        self.current = name

    def tick(self, faults_fired: int, every: float = 5.0) -> None:
        now = time.monotonic()
        if now - self.last_tick >= every:
            self.last_tick = now
            elapsed = now - self.phase_started
            self.say(f"{self.label}: {self.current} {elapsed:.0f}s, faults fired {faults_fired}")

    def say(self, text: str) -> None:
        if self.mid_line:  # the sandbox's last output had no newline; start ours on a line of its own
            print(file=self.stream)
            self.mid_line = False
        # one write per line: parallel workers share the stream
        self.stream.write(f"[mitmchaos {time.monotonic() - self.started:6.1f}s] {text}\n")
        self.stream.flush()


# ------------------------------------------------------------------ the run


def new_run_id() -> str:
    return f"mc{time.strftime('%Y%m%d%H%M%S')}{secrets.token_hex(2)}"


def default_report_path(plan: Plan, run_id: str) -> Path:
    # under the temp directory, so it never dirties the tree the next run needs clean
    return Path(tempfile.gettempdir()) / "mitmchaos" / f"{plan.name}-{run_id}.json"


def preflight(settings: RunSettings) -> tuple[Plan, Path]:
    plan = load_plan(settings.plan_path)
    if plan.abort_value("cost_usd_above") is None:
        raise RunError(NO_COST_CEILING)
    if os.geteuid() != 0:
        raise RunError("a run needs root: the sandbox's network and its firewall are rootful Podman and host "
                       "iptables rules (rootless Podman cannot keep the agent from bypassing the proxy)")
    try:
        root = project_root(settings.cwd)
        require_clean_tree(root)
    except WorkspaceError as exc:
        raise RunError(str(exc)) from None
    return plan, root


def execute(settings: RunSettings) -> RunOutcome:
    """Run every repetition; raises RunError when the run cannot start, Interrupted on a signal."""
    plan, root = preflight(settings)
    run_id = new_run_id()
    report = settings.out or default_report_path(plan, run_id)
    outcome = RunOutcome(settings.plan_path, plan, run_id, report, report.parent / report.stem, [], [])
    mark_helpers()
    with interrupts_raise():
        stack = CleanupStack(run_id)
        try:
            _execute(settings, plan, root, outcome, stack)
        finally:
            with signals_deferred():
                stack.close()
    return outcome


def _execute(settings: RunSettings, plan: Plan, root: Path, outcome: RunOutcome, stack: CleanupStack) -> None:
    from mitmchaos.parallel import run_phase  # it runs Repetition, defined below

    progress = Progress(settings.progress, plan.repeat * len(settings.phases))
    try:
        client = connect(stack)
    except SandboxError as exc:
        raise RunError(f"Podman is not usable, and a run never falls back to the host: {exc}") from None
    image = settings.sandbox_image or plan.sandbox_image or images.default_image()
    with signals_deferred():
        scratch = Path(tempfile.mkdtemp(prefix=f"mitmchaos-{outcome.run_id}-"))
        stack.push("path", path=str(scratch))
    # the kube backend runs its helpers in the pod; here they are forked, the server importing meanwhile
    forks = ForkServer(stack, scratch / "forkserver.log") if settings.backend == "podman" else None
    try:
        images.ensure_image(image)
        if settings.backend == "kube":
            images.ensure_image(images.proxy_image())
        ca_dir = _make_ca(scratch / "ca")
        bundle = _ca_bundle(client, image, ca_dir, scratch / "ca-bundle.pem")
    except (images.ImageError, SandboxError) as exc:
        raise RunError(f"the sandbox cannot run {image}: {exc}") from None
    if forks:
        try:
            forks.await_ready()
        except ForkServerError as exc:
            raise RunError(str(exc)) from None
    outcome.artifacts.mkdir(parents=True, exist_ok=True)
    shared = Shared(settings, plan, root, client, image, ca_dir, bundle, progress, outcome.run_id,
                    forks.launch if forks else exec_helper)
    for position, phase in enumerate(settings.phases):
        records = run_phase(shared, phase, position * plan.repeat, outcome.artifacts)
        outcome.records.extend(records)
        for record in records:
            outcome.carried_in = record.extra.get("carried_in", outcome.carried_in)
        if any(record.abort or record.error for record in records):
            return
        failed = [record for record in records if phase == "baseline" and record.verify_exit != 0]
        if failed:
            outcome.invalid_baseline = True
            progress.say(f"baseline repetition {failed[0].index + 1} failed verify ({failed[0].verify_exit}); "
                         "the faulted repetitions are skipped")
            return


def _make_ca(confdir: Path) -> Path:
    """One CA for the whole run, so the sandbox's CA bundle is built once."""
    CertStore.from_store(confdir, "mitmproxy", 2048)
    return confdir


def _ca_bundle(client, image: str, ca_dir: Path, dest: Path) -> Path:
    system = read_image_file(client, image, CA_BUNDLE) or b""
    dest.write_bytes(system.rstrip(b"\n") + b"\n" + (ca_dir / "mitmproxy-ca-cert.pem").read_bytes())
    dest.chmod(0o644)
    return dest


@dataclass
class Shared:
    settings: RunSettings
    plan: Plan
    root: Path
    client: object
    image: str
    ca_dir: Path
    bundle: Path
    progress: Progress
    run_id: str
    launch: Callable[[list[str], Path], subprocess.Popen] = exec_helper  # how helpers start
    run_ended: threading.Event = field(default_factory=threading.Event)  # parallel workers stop on it


def absolute_stand_in_paths(data: dict, plan_dir: Path) -> dict:
    """Stand-in files (relative to the plan's directory) made absolute, so the plan loads from anywhere."""
    for stand_in in data.get("stand_ins") or []:
        for key in ("dir", "flows"):
            if stand_in.get(key):
                stand_in[key] = str((plan_dir / stand_in[key]).resolve())
        target, sep, func = (stand_in.get("handler") or "").rpartition(":")
        if sep and target.endswith(".py"):
            stand_in["handler"] = f"{(plan_dir / target).resolve()}:{func}"
    return data


# ------------------------------------------------------------------ one repetition


class Repetition:
    def __init__(self, shared: Shared, phase: Phase, index: int, number: int, artifacts_root: Path):
        self.s = shared
        self.phase = phase
        self.index = index
        run_id = f"{shared.run_id}-{phase[0]}{index}"
        self.record = RepetitionRecord(index, phase, run_id, new_canary(),
                                       artifacts_root / f"{phase}-{index + 1}")
        self.number = number
        self.stack = CleanupStack(run_id)
        with signals_deferred():
            self.scratch = Path(tempfile.mkdtemp(prefix=f"mitmchaos-{run_id}-"))
            self.stack.push("path", path=str(self.scratch))
        self.events_path = self.scratch / "proxy" / "events.jsonl"
        self.gate_plan = self.scratch / "plan.json"
        self.proxy: ChaosProxy | None = None
        self.resolver: subprocess.Popen | None = None
        self.undo_proxy = self.undo_resolver = None

    def run(self) -> RepetitionRecord:
        try:
            self._run()
        except (RepetitionFailed, SandboxError, NetworkError, WorkspaceError, ProxyError, ForkServerError,
                APIError, OSError) as exc:
            self.record.error = f"{type(exc).__name__}: {exc}"
            self.s.progress.say(f"repetition failed: {self.record.error}")
        finally:
            with signals_deferred():
                try:
                    self._collect()
                finally:
                    self.stack.close()
        return self.record

    def _begin(self) -> tuple[Path, Path]:
        """Announce the repetition; its plan file and workspace (what every backend starts from)."""
        self.s.progress.repetition(self.number, self.phase, self.record.run_id)
        self.s.progress.phase("setting up")
        return self._effective_plan(), self._workspace()

    def _run(self) -> None:
        s, rec = self.s, self.record
        plan_file, worktree = self._begin()
        net = create_network(s.client, f"mitmchaos-{rec.run_id}", rec.run_id, self.stack)
        proxy_port = free_port(net.gateway)
        apply_firewall(net, proxy_port, rec.run_id, self.stack)
        self._spawn_resolver(net, plan_file)  # starts while the proxy does
        self._start_proxy(net, proxy_port, plan_file)
        self._await_resolver()
        runner_events = EventWriter(self.events_path, rec.run_id, "runner")
        try:
            runner_events.emit("repetition_started", index=self.index, phase=self.phase)
            self._agent(net, worktree, runner_events)
            if rec.abort is None and rec.error is None:
                self._verify(net, worktree)
            self._finished(runner_events)
        finally:
            runner_events.close()

    def _finished(self, runner_events: EventWriter) -> None:
        rec = self.record
        runner_events.emit("repetition_finished", index=self.index, phase=self.phase, agent_exit=rec.agent_exit,
                           verify_exit=rec.verify_exit, duration_s=rec.duration_s)
        took = time.monotonic() - self.s.progress.rep_started
        self.s.progress.say(f"{self.s.progress.label}: done in {took:.1f}s, agent exit {rec.agent_exit} "
                            f"({rec.duration_s:.1f}s), verify exit {rec.verify_exit}, "
                            f"faults fired {rec.extra.get('faults_fired', 0)}")

    # -- setting up

    def _effective_plan(self) -> Path:
        """The plan the proxy and resolver load: stand-in paths made absolute; no faults for a baseline."""
        source = self.s.settings.plan_path.resolve()
        data = absolute_stand_in_paths(yaml.safe_load(source.read_text()), source.parent)
        if self.phase == "baseline":
            for fault in data["faults"]:
                fault["probability"] = 0
        path = self.scratch / "plan.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        plan = load_plan(path)  # the derived plan must still be valid
        self.gate_plan.write_text(gate_plan_json(plan))
        return path

    def _workspace(self) -> Path:
        dest = self.scratch.with_name(self.scratch.name + "-work")
        create_worktree(self.s.root, dest, None if self.s.settings.keep else self.stack)
        if self.s.settings.keep:
            self.record.extra["worktree"] = str(dest)
            self.s.progress.say(f"{self.s.progress.label}: worktree kept at {dest}")
        carried = carry_in(self.s.root, dest)
        self.record.extra["carried_in"] = carried
        if carried and self.number == 1:
            self.s.progress.say("carried into each worktree (project path rewritten to /work): "
                                + ", ".join(carried))
        state = dest / STATE_DIR
        state.mkdir(exist_ok=True)
        for mountpoint in ("events.jsonl", "plan.json"):
            (state / mountpoint).touch()
        self.events_path.parent.mkdir(parents=True, exist_ok=True)
        self.events_path.touch()
        hand_to_sandbox_user(dest)
        self.git = sandbox_git(dest)
        os.chown(self.events_path, SANDBOX_UID, SANDBOX_UID)  # gates in the sandbox append to it
        return dest

    def _start_proxy(self, net: SandboxNetwork, port: int, plan_file: Path) -> None:
        self.s.progress.phase("starting proxy and resolver")
        proxy = ChaosProxy(workdir=self.scratch / "proxy", plan=plan_file, canary=self.record.canary,
                           run_id=self.record.run_id, host=net.gateway, port=port,
                           options=proxy_options(self.index, str(self.scratch / "flows.mitm")),
                           launch=self.s.launch)
        shutil.copytree(self.s.ca_dir, proxy.confdir)
        self.proxy = proxy
        # pushed first: an interrupt while it starts up must still stop it
        self.undo_proxy = self.stack.push("process", live=proxy.stop, pid=None, start_time=None)
        with signals_deferred():  # until its process is known; start() takes a second or two
            proxy.start()  # raises ProxyError with the log when it exits or never answers
        pid = proxy.process.pid
        self.stack.update(self.undo_proxy, pid=pid, start_time=process_start_time(pid))

    def _spawn_resolver(self, net: SandboxNetwork, plan_file: Path) -> None:
        cmd = resolver_command(console_script("mitmchaos"), str(plan_file),
                               str(self.events_path), f"{net.gateway}:{DNS_PORT}", self.record, self.index)
        log_path = self.scratch / "resolver.log"
        self.resolver, self.undo_resolver = spawn(self.stack, lambda: self.s.launch(cmd, log_path))

    def _await_resolver(self) -> None:
        process = self.resolver
        deadline = time.monotonic() + RESOLVER_START_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RepetitionFailed(f"the resolver exited with {process.returncode} at start-up:\n"
                                       f"{_tail(self.scratch / 'resolver.log')}")
            loaded = read_events(self.events_path).of_type("plan_loaded")
            if any(e.get("component") == "resolver" for e in loaded):
                return
            time.sleep(0.05)
        raise RepetitionFailed(f"the resolver did not come up within {RESOLVER_START_S:.0f}s:\n"
                               f"{_tail(self.scratch / 'resolver.log')}")

    # -- the sandbox

    def _container(self, net: SandboxNetwork, worktree: Path, role: str, command: str) -> ContainerSpec:
        env = {}
        for name in (*PROVIDER_KEYS, *self.s.plan.env):  # by name: the plan never holds a value
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(sandbox_env(self.s.plan, self.proxy.url, self.record, self.index))
        git_mounts, git_env = self.git
        env.update(git_env)
        mounts = [
            *git_mounts,
            _bind(worktree, "/work"),
            _bind(self.events_path, EVENTS_IN_SANDBOX),
            _bind(self.gate_plan, PLAN_IN_SANDBOX, read_only=True),
            _bind(self.s.bundle, CA_BUNDLE, read_only=True),
        ]
        return ContainerSpec(image=self.s.image, command=["sh", "-c", command],
                             name=f"mitmchaos-{self.record.run_id}-{role}", network=net.name,
                             dns=[net.gateway], env=env, mounts=mounts,
                             labels=resource_labels(self.record.run_id), workdir="/work")

    def _agent(self, net: SandboxNetwork, worktree: Path, runner_events: EventWriter) -> None:
        rec = self.record
        monitor = AbortMonitor(self.s.plan, self.events_path)
        self.s.progress.phase("agent")
        started = time.monotonic()

        def should_stop() -> str | None:
            ended = self._run_ended()
            if ended:
                return ended
            elapsed = time.monotonic() - started
            abort = monitor.check(elapsed)
            self.s.progress.tick(monitor.faults_fired)
            if abort:
                rec.abort = abort
                runner_events.emit("abort", **abort)
                self.s.progress.say(f"abort: {abort['condition']} (observed {abort['observed']})")
                return "abort"
            crashed = self._crashed_helper()
            if crashed:
                rec.error = crashed
                return "error"
            return None

        spec = self._container(net, worktree, "agent", self.s.plan.agent)
        result = run_container(self.s.client, spec, self.stack, on_stdout=self._echo(),
                               on_stderr=self._echo(stderr=True), should_stop=should_stop)
        rec.duration_s = round(time.monotonic() - started, 3)
        if rec.abort is None and rec.error is None:
            should_stop()  # what the agent's last moments wrote: a fault fired, a ceiling crossed
        rec.agent_exit = result.exit_code
        self._save("agent.out", result.stdout)
        self._save("agent.err", result.stderr.encode())
        rec.extra["faults_fired"] = monitor.faults_fired
        if rec.error is None:
            rec.error = self._crashed_helper()  # died right at the end: the repetition is still not sound

    def _verify(self, net: SandboxNetwork, worktree: Path) -> None:
        self.s.progress.phase("verify")
        spec = self._container(net, worktree, "verify", self.s.plan.verify)
        result = run_container(self.s.client, spec, self.stack, on_stdout=self._echo(),
                               on_stderr=self._echo(stderr=True), should_stop=self._run_ended)
        self.record.verify_exit = result.exit_code
        self._save("verify.out", result.stdout + result.stderr.encode())

    def _run_ended(self) -> str | None:
        """Another repetition ended the run (parallel workers): this one stops too."""
        if self.s.run_ended.is_set():
            self.record.error = RUN_ENDED
            return "run ended"
        return None

    def _crashed_helper(self) -> str | None:
        if self.proxy is not None and not self.proxy.alive():
            return (f"the proxy exited with {self.proxy.process.returncode} during the repetition:\n"
                    f"{self.proxy.log_text()[-2000:]}")
        if self.resolver is not None and self.resolver.poll() is not None:
            return (f"the resolver exited with {self.resolver.returncode} during the repetition:\n"
                    f"{_tail(self.scratch / 'resolver.log')}")
        return None

    def _echo(self, stderr: bool = False):
        terminal = self.s.settings.terminal_err if stderr else self.s.settings.terminal

        def write(chunk: bytes) -> None:
            terminal.write(chunk)
            terminal.flush()
            self.s.progress.mid_line = not chunk.endswith(b"\n")

        return write

    def _save(self, name: str, data: bytes) -> None:
        (self.scratch / name).write_bytes(data)

    # -- collecting

    def _collect(self) -> None:
        """Stop the helpers (flushing flows and events), then copy the artifacts, secrets masked."""
        for process in (self.resolver, self.proxy and self.proxy.process):
            if process is not None and process.poll() is None:
                process.terminate()  # both at once; the releases below wait for them
        for undo in (self.undo_resolver, self.undo_proxy):
            if undo is not None:
                self.stack.release(undo)
        art = self.record.artifacts
        art.mkdir(parents=True, exist_ok=True)
        sources = {"events.jsonl": self.events_path, "proxy.log": self.scratch / "proxy" / "proxy.log"}
        for name in ARTIFACTS:
            source = sources.get(name, self.scratch / name)
            if source.exists():
                shutil.copyfile(source, art / name)
        mask_secrets(art, [os.environ[n] for n in (*PROVIDER_KEYS, *self.s.plan.env) if os.environ.get(n)])


def mask_secrets(directory: Path, secrets_: list[str]) -> None:
    """Overwrite every occurrence of a passed secret in the artifacts with as many asterisks.

    The addons redact credentials before flows are saved; this is the second line, for what
    the agent printed itself. Same length, so binary flow files stay well-formed.
    """
    needles = [s.encode() for s in secrets_ if len(s) >= 8]
    if not needles:
        return
    for path in directory.iterdir():
        data = path.read_bytes()
        masked = data
        for needle in needles:
            masked = masked.replace(needle, b"*" * len(needle))
        if masked != data:
            path.write_bytes(masked)


def sandbox_env(plan: Plan, proxy_url: str, record: RepetitionRecord, index: int) -> dict[str, str]:
    """What the agent and verify see besides the provider keys: the proxy, its CA, the run's names."""
    # a placeholder, never the real key, where the scripted model answers
    return {**sandbox_keys(plan),
            "HTTPS_PROXY": proxy_url, "HTTP_PROXY": proxy_url, "https_proxy": proxy_url, "http_proxy": proxy_url,
            "NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1",
            **{name: CA_BUNDLE for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                                            "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")},
            "MITMCHAOS_PLAN": PLAN_IN_SANDBOX, "MITMCHAOS_EVENTS": EVENTS_IN_SANDBOX,
            "MITMCHAOS_RUN_ID": record.run_id, "MITMCHAOS_CANARY": record.canary,
            "MITMCHAOS_REPETITION": str(index)}


def proxy_options(index: int, flows: str) -> dict[str, str]:
    # lazy: the stand-ins answer without an upstream, so none is connected to before the request
    return {"connection_strategy": "lazy", "chaos_repetition": str(index), "save_stream_file": flows}


def resolver_command(mitmchaos: str, plan_file: str, events: str, listen: str, record: RepetitionRecord,
                     index: int) -> list[str]:
    return [mitmchaos, "resolver", "--plan", plan_file, "--events", events, "--listen", listen,
            "--run-id", record.run_id, "--canary", record.canary, "--repetition", str(index)]


def _bind(source: Path, target: str, read_only: bool = False) -> dict:
    return {"type": "bind", "source": str(source), "target": target, "read_only": read_only}


def _tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


# ------------------------------------------------------------------ score and report


def runner_warnings(outcome: RunOutcome) -> list[str]:
    """What only the runner knows: gates the plan needs that the project does not have."""
    gate_faults = [f.id for f in outcome.plan.faults if "gate" in f.fault_type.injected_by]
    carried_gates = [p for p in outcome.carried_in if p.startswith(".mitmchaos/hooks/")]
    if gate_faults and not carried_gates:
        return [f"{', '.join(gate_faults)} need(s) the project's gates, but it has no .mitmchaos/hooks/: "
                "a harness in the sandbox runs ungoverned and these faults cannot fire"]
    return []


def score_and_report(outcome: RunOutcome):
    from mitmchaos.report import write_reports
    from mitmchaos.rundir import save_run
    from mitmchaos.scoring import score

    save_run(outcome.artifacts, outcome.plan_path, outcome.plan_path.read_text(), outcome.records)
    result = score(outcome.plan, outcome.records)
    result.warnings.extend(runner_warnings(outcome))
    write_reports(result, outcome.report_path)
    return result
