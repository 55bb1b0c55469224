"""A run's fork server: one process that has imported the helpers' code forks each helper.

A repetition's proxy spent about a second importing mitmproxy and the addons before it
could listen, and its resolver half as much, every repetition again. The run starts this
server once instead: it imports that code, then for each request forks a child that runs
the named console script (``mitmdump`` or ``mitmchaos``) with the given arguments, as the
script itself would, in a session of its own with its output appended to a log. It forks
from a single thread with no event loop, so a child starts as clean as a fresh interpreter.

Each child is handed to the runner over a socket pair of its own: the server sends the
child's PID and a pidfd (signals through it never reach a recycled PID), and after reaping
the child its exit status, as ``subprocess`` reports it. ``ForkedProcess`` is the runner's
side, used like the ``subprocess.Popen`` it replaces.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import traceback
from importlib.metadata import entry_points
from pathlib import Path
from typing import NoReturn

from mitmchaos.cleanup import CleanupStack, exec_helper, spawn

PROGRAMS = ("mitmdump", "mitmchaos")  # console scripts a child may run
# what those load after their entry point: the proxy hosts (mitmchaos proxy, mitmdump and its -s
# script), the resolver
PRELOAD = ("mitmchaos.proxyhost", "mitmproxy.tools.dump", "mitmchaos.addons.chaos", "mitmchaos.resolver",
           "mitmchaos.plan")
READY = b"ready"
MESSAGE_MAX = 1 << 20
STATUS_LOST = 255  # the server died before it could report a child's exit status
START_TIMEOUT_S = 60.0  # the imports, on a loaded machine
REPLY_TIMEOUT_S = 10.0


class ForkServerError(RuntimeError):
    pass


# ------------------------------------------------------------------ the runner's side


class ForkServer:
    """Started once per run (its process on the run's cleanup stack); ``launch`` forks a helper."""

    def __init__(self, stack: CleanupStack, log_path: Path):
        self.log_path = log_path
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            cmd = [sys.executable, "-m", "mitmchaos.forkserver", str(theirs.fileno())]
            self.process, _ = spawn(stack, lambda: exec_helper(cmd, log_path, pass_fds=(theirs.fileno(),)))
        self.lock = threading.Lock()  # parallel repetitions share the server
        self.ready = False

    def launch(self, cmd: list[str], log_path: Path) -> ForkedProcess:
        """Fork ``cmd`` (a console script and its arguments), appending its output to ``log_path``."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._request({"argv": cmd, "log": str(log_path), "cwd": os.getcwd(), "env": dict(os.environ)},
                          theirs)
        try:
            return self._child_on(ours)
        except BaseException:
            ours.close()
            raise

    def _request(self, request: dict, channel: socket.socket) -> None:
        with self.lock:
            self.await_ready()
            try:
                socket.send_fds(self.control, [json.dumps(request).encode()], [channel.fileno()])
            except OSError as exc:
                raise ForkServerError(f"the fork server is gone ({exc}):\n{self._log_tail()}") from None

    def _child_on(self, channel: socket.socket) -> ForkedProcess:
        if not _readable(channel, REPLY_TIMEOUT_S):
            raise ForkServerError(f"the fork server did not answer within {REPLY_TIMEOUT_S:.0f}s")
        reply, fds, _, _ = socket.recv_fds(channel, MESSAGE_MAX, 1)
        if not fds:  # it said why, or it died
            raise ForkServerError(reply.decode(errors="replace") or f"the fork server is gone:\n{self._log_tail()}")
        return ForkedProcess(int(reply), fds[0], channel)

    def await_ready(self) -> None:
        if self.ready:
            return
        if not _readable(self.control, START_TIMEOUT_S) or self.control.recv(len(READY)) != READY:
            raise ForkServerError(f"the fork server did not start:\n{self._log_tail()}")
        self.ready = True

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""


class ForkedProcess:
    """A helper the fork server forked, with the part of ``subprocess.Popen``'s interface the runner uses."""

    def __init__(self, pid: int, pidfd: int, channel: socket.socket):
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = pidfd
        self._channel = channel

    def poll(self) -> int | None:
        if self.returncode is None and _readable(self._pidfd, 0):
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not _readable(self._pidfd, timeout):
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            self._collect()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # as Popen: a collected child is never signalled
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass  # exited; poll() collects it

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _collect(self) -> None:
        """The child has exited: its status follows as soon as the server has reaped it."""
        status = self._channel.recv(64) if _readable(self._channel, REPLY_TIMEOUT_S) else b""
        self.returncode = int(status) if status else STATUS_LOST
        os.close(self._pidfd)
        self._channel.close()


def _readable(fd, timeout: float | None) -> bool:
    poller = select.poll()  # not select(): a run with many descriptors open may pass FD_SETSIZE
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else timeout * 1000))


# ------------------------------------------------------------------ the server


def serve(control: socket.socket) -> None:
    """Fork a child per request until the runner closes its end."""
    programs = {ep.name: ep for ep in entry_points(group="console_scripts") if ep.name in PROGRAMS}
    mains = {name: ep.load() for name, ep in programs.items()}
    for module in PRELOAD:
        importlib.import_module(module)
    if threading.active_count() != 1:  # forking would copy another thread's locks, held, into the child
        raise ForkServerError(f"threads after the imports: {threading.enumerate()}")
    wakeup_r, wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wakeup_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the selector up
    children: dict[int, socket.socket] = {}
    control.send(READY)
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        selector.register(wakeup_r, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj is control:
                    message, fds, _, _ = socket.recv_fds(control, MESSAGE_MAX, 1)
                    if not message:
                        return  # the runner is gone; the children live on in their own sessions
                    inherited = [selector, control, *children.values(), wakeup_r, wakeup_w]
                    _fork(json.loads(message), socket.socket(fileno=fds[0]), mains, inherited, children)
                else:
                    os.read(wakeup_r, 4096)
                    _reap(children)


def _fork(request: dict, channel: socket.socket, mains: dict, inherited: list, children: dict) -> None:
    name = Path(request["argv"][0]).name
    if name not in mains:
        channel.send(f"the fork server runs {', '.join(PROGRAMS)}, not {name}".encode())
        channel.close()
        return
    try:
        pid = os.fork()
    except OSError as exc:
        channel.send(f"fork: {exc}".encode())
        channel.close()
        return
    if pid == 0:
        _child(request, mains[name], [*inherited, channel])
    pidfd = os.pidfd_open(pid)  # before any reaping, so it is this child's
    try:
        socket.send_fds(channel, [str(pid).encode()], [pidfd])
    finally:
        os.close(pidfd)
    children[pid] = channel


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        channel = children.pop(pid, None)
        if channel is not None:
            try:
                channel.send(str(os.waitstatus_to_exitcode(status)).encode())
            except OSError:
                pass  # the runner stopped listening
            channel.close()


def _child(request: dict, main, inherited: list) -> NoReturn:
    """Become the program: the server's descriptors closed, a session and output of its own."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for item in inherited:
            os.close(item) if isinstance(item, int) else item.close()
        os.setsid()
        _redirect(request["log"])  # first, so that what goes wrong next is in the helper's log
        Path("/proc/self/comm").write_text(_process_name(request["argv"]))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = request["argv"]
        code = _run_main(main)
    except BaseException:  # noqa: BLE001 - reported in the log and the exit status, never to the server
        traceback.print_exc()
    finally:
        # what the interpreter's exit would do, as multiprocessing's forked children do it
        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)


def _process_name(argv: list[str]) -> str:
    """What ps and top show: the program, and for mitmchaos its subcommand ("mitmchaos proxy")."""
    name = Path(argv[0]).name
    return (f"{name} {argv[1]}" if name == "mitmchaos" and len(argv) > 1 else name)[:15]


def _run_main(main) -> int:
    """The exit status ``sys.exit(main())`` would give, as the console script does."""
    try:
        result = main()
    except SystemExit as exc:
        result = exc.code
    if result is None or isinstance(result, int):
        return result or 0
    print(result, file=sys.stderr)
    return 1


def _redirect(log_path: str) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for source, target in ((devnull, 0), (log, 1), (log, 2)):
        os.dup2(source, target)
    os.close(devnull)
    os.close(log)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
