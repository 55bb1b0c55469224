"""Start and stop a real proxy with the mitmchaos addons: `mitmchaos proxy`, or mitmdump -s.

Used by the runner (one proxy per repetition), the pytest plugin and the tests. The
proxy's CA lives in its own confdir, so nothing touches ~/.mitmproxy.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from mitmchaos.cleanup import exec_helper, terminate
from mitmchaos.events import read_events


def addon_script() -> Path:
    return Path(str(resources.files("mitmchaos.addons").joinpath("chaos.py")))


def console_script(name: str) -> str:
    """A console script of this environment (mitmdump, mitmchaos), else the one on PATH."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def mitmdump_binary() -> str:
    return console_script("mitmdump")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ProxyError(RuntimeError):
    pass


@dataclass
class ChaosProxy:
    """A running proxy. ``env()`` gives the variables a client needs to go through it."""

    workdir: Path
    plan: Path | None
    canary: str
    run_id: str
    host: str = "127.0.0.1"
    port: int = 0
    options: dict[str, str] = field(default_factory=dict)
    launch: Callable[[list[str], Path], subprocess.Popen] = field(default=exec_helper, repr=False)
    # `mitmchaos proxy` (runner/proxyhost.py) unless asked for mitmdump -s addons/chaos.py
    via_mitmdump: bool = False
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def name(self) -> str:
        return "mitmdump" if self.via_mitmdump else "mitmchaos proxy"

    @property
    def confdir(self) -> Path:
        return self.workdir / "mitmproxy-conf"

    @property
    def ca_path(self) -> Path:
        return self.confdir / "mitmproxy-ca-cert.pem"

    @property
    def events_path(self) -> Path:
        return self.workdir / "events.jsonl"

    @property
    def log_path(self) -> Path:
        return self.workdir / "proxy.log"

    def command(self) -> list[str]:
        host = [mitmdump_binary(), "-s", str(addon_script())] if self.via_mitmdump else [
            console_script("mitmchaos"), "proxy"]
        cmd = [*host, "--listen-host", self.host, "--listen-port", str(self.port),
               "--set", f"confdir={self.confdir}", "--set", f"chaos_events={self.events_path}",
               "--set", f"chaos_canary={self.canary}", "--set", f"chaos_run_id={self.run_id}"]
        if self.plan is not None:
            cmd += ["--set", f"chaos_plan={self.plan}"]
        for key, value in self.options.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = 30.0) -> ChaosProxy:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port(self.host)
        self.process = self.launch(self.command(), self.log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ProxyError(f"{self.name} exited with {self.process.returncode} at start-up:\n"
                                 f"{self.log_text()}")
            if self._plan_announced() and self.ca_path.exists() and _listening(self.host, self.port):
                return self
            time.sleep(0.01)  # it comes up within ~0.15 s from the fork server
        self.stop()
        raise ProxyError(f"{self.name} did not listen on {self.host}:{self.port} within {timeout}s:\n"
                         f"{self.log_text()}")

    def _plan_announced(self) -> bool:
        # the addons load the plan asynchronously to the listener coming up; the events file may be
        # shared with other components (the runner's resolver), so only the proxy's own line counts
        return self.plan is None or any(e["component"] == "proxy" for e in self.events("plan_loaded"))

    def stop(self, timeout: float = 10.0) -> int | None:
        return terminate(self.process, timeout)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def events(self, type: str | None = None) -> list[dict]:
        events = read_events(self.events_path).events
        return [e for e in events if type is None or e["type"] == type]

    def wait_events(self, type: str, count: int = 1, timeout: float = 10.0) -> list[dict]:
        """The events of ``type`` once there are at least ``count`` of them (or after ``timeout``).

        A client can finish before the proxy's hooks write what they saw (an ``llm_call`` is
        written when the proxy has the whole response, which may be after the client does).
        """
        deadline = time.monotonic() + timeout
        while True:
            found = self.events(type)
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.02)

    def expect(self):
        """Assertions over this proxy's events so far (see mitmchaos.assertions)."""
        from mitmchaos.assertions import Expect

        return Expect(self.events())

    def env(self) -> dict[str, str]:
        """Variables that send a client's HTTP(S) through this proxy and make it trust the proxy's CA."""
        ca = str(self.ca_path)
        return {"HTTPS_PROXY": self.url, "HTTP_PROXY": self.url, "https_proxy": self.url, "http_proxy": self.url,
                "NO_PROXY": "", "no_proxy": "", "SSL_CERT_FILE": ca, "REQUESTS_CA_BUNDLE": ca,
                "NODE_EXTRA_CA_CERTS": ca, "PIP_CERT": ca, "CURL_CA_BUNDLE": ca, "GIT_SSL_CAINFO": ca}

    def __enter__(self) -> ChaosProxy:
        return self.start() if not self.alive() else self

    def __exit__(self, *exc) -> None:
        self.stop()


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def env_without_proxy_settings() -> dict[str, str]:
    """The current environment minus proxy and CA variables, which some machines set globally."""
    drop = {"HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR",
            "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}
    return {k: v for k, v in os.environ.items() if k.upper() not in drop}
