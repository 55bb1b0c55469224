"""The Podman driver: the API service, and one locked-down container run at a time.

Driven through the ``podman`` package against ``podman system service``. When no service
answers on the system socket, a private one is started on a socket of our own and
stopped with the run. Measured quirks of podman-py 5.x against Podman 4.3: ``wait()``
returns 0 after a failed start (so start errors are checked here), and a partial
``ulimits`` list replaces the containers.conf defaults (so none is passed).
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from podman import PodmanClient
from podman.errors import APIError, NotFound

from mitmchaos.cleanup import CleanupStack, popen, resource_labels, signals_deferred, spawn

SYSTEM_SOCKET = "unix:///run/podman/podman.sock"
SANDBOX_UID = 1000


class SandboxError(RuntimeError):
    pass


def _client_if_healthy(url: str) -> PodmanClient | None:
    client = PodmanClient(base_url=url, timeout=30)
    try:
        if client.ping():
            return client
    except Exception:  # noqa: BLE001 - any failure means "not this socket"
        pass
    client.close()
    return None


def connect(stack: CleanupStack, timeout: float = 30.0) -> PodmanClient:
    """A client for a healthy Podman service, starting a private one if needed. Never falls back."""
    client = _client_if_healthy(SYSTEM_SOCKET)
    if client is not None:
        return client
    with signals_deferred():
        sockdir = Path(tempfile.mkdtemp(prefix="mitmchaos-podman-"))
        stack.push("path", path=str(sockdir))
    url = f"unix://{sockdir}/podman.sock"
    try:
        service, _ = spawn(stack, popen(["podman", "system", "service", "--time=0", url],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    except FileNotFoundError:
        raise SandboxError("podman is not installed; run `make host` (sandbox/host-setup.sh)") from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.poll() is not None:
            raise SandboxError(f"podman system service exited with {service.returncode}: "
                               f"{service.stderr.read().decode(errors='replace')[-2000:]}")
        client = _client_if_healthy(url)
        if client is not None:
            return client
        time.sleep(0.1)
    raise SandboxError(f"the Podman API service did not answer on {url} within {timeout:.0f}s")


def read_image_file(client: PodmanClient, image: str, path: str) -> bytes | None:
    """A file of ``image`` (None if it has none), read by a throwaway sandbox container.

    Also the preflight proof that containers start here at all: the API answering is not enough.
    """
    # Labelled like a run's own containers, so `mitmchaos cleanup` finds it if the run is killed meanwhile.
    spec = ContainerSpec(image=image, command=["cat", path], name=None, network="none",
                         labels=resource_labels("read-image-file"))
    result = run_container(client, spec, stack=None)
    return result.stdout if result.exit_code == 0 else None


@dataclass
class ContainerSpec:
    image: str
    command: list[str]
    name: str | None
    network: str  # a network name, or "none"
    dns: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[dict] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"


@dataclass
class ContainerResult:
    exit_code: int | None  # None: stopped before it exited on its own
    stdout: bytes = b""
    stderr: str = ""
    stopped: str | None = None  # why the runner stopped it


def run_container(client: PodmanClient, spec: ContainerSpec, stack: CleanupStack | None,
                  on_stdout: Callable[[bytes], None] = lambda b: None,
                  on_stderr: Callable[[bytes], None] = lambda b: None,
                  should_stop: Callable[[], str | None] = lambda: None) -> ContainerResult:
    """Run ``spec`` as the sandbox user with every capability dropped, streaming its output.

    ``should_stop`` is asked about once a second while it runs; a reason stops it.
    """
    net_args = {"network_mode": "none"} if spec.network == "none" else {"networks": {spec.network: {}}}
    with signals_deferred():
        try:
            container = client.containers.create(
                spec.image, spec.command, name=spec.name, user=f"{SANDBOX_UID}:{SANDBOX_UID}",
                environment=spec.env, mounts=spec.mounts, dns=spec.dns, cap_drop=["ALL"],
                security_opt=["no-new-privileges"], sysctls={"net.ipv6.conf.all.disable_ipv6": "1"},
                labels=spec.labels, working_dir=spec.workdir, **net_args)
        except APIError as exc:
            raise SandboxError(f"cannot create the sandbox container: {exc}") from exc
        undo = stack.push("container", live=lambda: _remove(container), name=container.id) if stack else None
    try:
        _start(container)
        out, err = _LogFollower(container, on_stdout, stdout=True), _LogFollower(container, on_stderr, stdout=False)
        stopped = _wait(container, should_stop)
        exit_code = None if stopped else _exit_code(container)
        full_out, full_err = _stored_logs(container, stdout=True), _stored_logs(container, stdout=False)
        out.finish(full_out)
        err.finish(full_err)
        return ContainerResult(exit_code, full_out, full_err.decode(errors="replace"), stopped)
    finally:
        if undo is not None:
            stack.release_soon(undo)  # it has exited: what runs next need not wait for its removal
        else:
            _remove(container)


NEVER_STARTED = "0001-01-01"  # Go's zero time: Podman's StartedAt for a container that never started
START_CHECKS = 20  # inspections, 50 ms apart, through Podman's 500s while a process exits


def _start(container) -> None:
    """Start the container, or raise SandboxError. Podman 4.3 can answer a start with 500 when a
    short command exits before it reads the process's cgroup ("read /proc/N/cgroup: no such
    process"), though the command ran; the recorded start time says whether it did."""
    failure: Exception | None = None
    try:
        container.start()
    except APIError as exc:
        failure = exc
    for _ in range(START_CHECKS):
        try:
            container.reload()
            break
        except APIError as exc:  # NotFound included: seen once, a container gone after its start
            failure = failure or exc
            time.sleep(0.05)
    else:
        raise SandboxError(f"the sandbox container did not start: {failure}")
    state = container.attrs["State"]
    if state.get("Error"):
        raise SandboxError(f"the sandbox container did not start: {state['Error']}")
    if str(state.get("StartedAt") or NEVER_STARTED).startswith(NEVER_STARTED):
        raise SandboxError(f"the sandbox container did not start: {failure or 'no start recorded'}")


def _wait(container, should_stop: Callable[[], str | None], every: float = 1.0) -> str | None:
    asked = time.monotonic()
    pause = 0.01  # doubling up to 0.1 s: a short command is seen to end within a few ms
    while True:
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
        try:
            container.reload()
        except APIError:  # Podman 4.3 answers 500 while the container's process is exiting
            continue
        if container.status not in ("created", "running", "configured"):
            return None
        if time.monotonic() - asked >= every:
            asked = time.monotonic()
            reason = should_stop()
            if reason:
                container.stop(timeout=2)
                return reason


def _exit_code(container) -> int:
    """The exit code of a container ``_wait`` saw finish.

    Read from the state just inspected: Podman 4.3's wait endpoint polls every 250 ms, which
    was half of what a short container cost. Any other state than exited is left to wait().
    """
    if container.status in ("exited", "stopped"):
        return container.attrs["State"]["ExitCode"]
    return container.wait()


def _stored_logs(container, stdout: bool) -> bytes:
    return b"".join(container.logs(stream=False, stdout=stdout, stderr=not stdout))


class _LogFollower:
    """Echoes one of a container's streams live, until ``finish`` hands over to the stored log.

    A follow stream can end before the last output arrives (measured: a 216 kB cat came back
    150 kB once in 15), and Podman 4.3 closes it only about 250 ms after the container exits.
    So it is not waited for: the stored log is complete, it is the record, and the terminal
    gets from it what the stream had not delivered yet.
    """

    def __init__(self, container, callback: Callable[[bytes], None], stdout: bool):
        self.callback = callback
        self.echoed = bytearray()
        self.finished = False
        self.lock = threading.Lock()  # a chunk is echoed whole before finish, or not at all
        threading.Thread(target=self._pump, args=(container, stdout), daemon=True).start()

    def _pump(self, container, stdout: bool) -> None:
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=stdout, stderr=not stdout):
                with self.lock:
                    if self.finished:
                        return
                    self.echoed.extend(chunk)
                    self.callback(chunk)
        except (APIError, NotFound):
            pass  # the container went away (stopped on an abort); what was read is kept

    def finish(self, stored: bytes) -> None:
        with self.lock:
            self.finished = True
            if len(stored) > len(self.echoed) and stored.startswith(bytes(self.echoed)):
                self.callback(stored[len(self.echoed):])


def _remove(container) -> None:
    try:
        # a forced remove would give the agent Podman's default 10 s to exit on SIGTERM
        container.stop(timeout=1)
    except (APIError, NotFound, ValueError):
        pass  # not running (any more); podman-py cannot parse Podman's empty 304 answer then
    try:
        container.remove(force=True)
    except NotFound:
        pass
