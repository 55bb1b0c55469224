"""The paths a request can take in a benchmark: direct, bare mitmdump, and the addons in their
two hosts, mitmdump -s addons/chaos.py ("suite") and `mitmchaos proxy` ("mitmchaos", the runner's).

All are ``ChaosProxy`` (runner/proxy.py) with the runner's connection options; the bare one
only drops the addons and their options. HTTPS runs the proxy in reverse mode: the client
speaks TLS to it and trusts its CA, it speaks plain HTTP to the loopback upstream, so the
figure is the cost of terminating the agent's TLS.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from mitmchaos.decisions import new_canary
from mitmchaos.proxy import ChaosProxy, mitmdump_binary

PLAN = Path(__file__).with_name("no-match-plan.yaml")
RUNNER_OPTIONS = {"connection_strategy": "lazy"}  # as runner/run.py starts its proxy


class BareMitmdump(ChaosProxy):
    """mitmdump without the addons, otherwise started and stopped like the suite."""

    name = "mitmdump"  # in its start-up errors

    def command(self) -> list[str]:
        cmd = [
            mitmdump_binary(),
            "--listen-host",
            self.host,
            "--listen-port",
            str(self.port),
            "--set",
            f"confdir={self.confdir}",
        ]
        for key, value in self.options.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd


HOSTS = ("bare", "suite", "mitmchaos")
# The speed goals (request overhead, first chunk) are judged on the proxy mitmchaos puts in front of
# an agent. The suite's rows keep their ratios without a goal: there the addons' work comes on top
# of all of mitmdump's, which the lean host more than makes up (README, Benchmarks), and bare
# mitmdump itself misses the first-chunk goal on these machines.
JUDGED_HOST = "mitmchaos"


def start_proxy(workdir: Path, host: str, **options: str) -> ChaosProxy:
    """``host``: one of HOSTS."""
    kind = BareMitmdump if host == "bare" else ChaosProxy
    proxy = kind(
        workdir=workdir,
        plan=None if host == "bare" else PLAN,
        canary=new_canary(),
        run_id="bench",
        options={**RUNNER_OPTIONS, **options},
        via_mitmdump=host == "suite",
    )
    return proxy.start()


def trust(proxy: ChaosProxy) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(proxy.ca_path))


def peak_rss_mib(pid: int) -> float:
    """A live process's peak resident set (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """A live process's CPU time, in the scheduler's own nanoseconds, summed over its threads: unlike
    wall time, barely moved by other load; unlike /proc/<pid>/stat, not rounded to clock ticks."""
    return sum(int(stat.read_text().split()[0]) for stat in Path(f"/proc/{pid}/task").glob("*/schedstat")) / 1e9
