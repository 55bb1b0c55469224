"""One internal Podman network per repetition, its host bridge, and a firewall on that bridge.

The network is ``--internal`` with an explicit gateway, so the host bridge carries the
gateway address and the container has no route anywhere else. The bridge is created
before any container joins (netavark would create it only then, and delete it when the
last container leaves), so the proxy and the resolver can bind the gateway address first;
netavark adopts it. Host firewall rules on the bridge accept only the proxy port and DNS
on the gateway and reject the rest, IPv4 and IPv6 (the link-local address would
otherwise reach any host service bound to ``::``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import random
import subprocess
import threading
from dataclasses import dataclass

from podman.errors import APIError, NotFound

from mitmchaos.cleanup import (CHAIN_PREFIX, CleanupStack, iptables_restore, resource_labels, rule_comment,
                               signals_deferred)

# Podman hands out 10.89.0.0/24 upwards for its own networks; start far above that.
SUBNET_POOL = [ipaddress.ip_network(f"10.89.{i}.0/24") for i in range(100, 250)]
DNS_PORT = 53
# Parallel repetitions in one process pick and take a subnet one at a time; other processes
# racing for the same one are caught by Podman's refusal and a retry.
_ALLOCATING = threading.Lock()


class NetworkError(RuntimeError):
    pass


@dataclass
class SandboxNetwork:
    name: str
    subnet: str
    gateway: str
    bridge: str


def chain_name(repetition_id: str) -> str:
    """Unique per repetition, and at most 28 characters (iptables' limit)."""
    return f"{CHAIN_PREFIX}{hashlib.sha256(repetition_id.encode()).hexdigest()[:12]}"


def create_network(client, name: str, run_id: str, stack: CleanupStack, internal: bool = True) -> SandboxNetwork:
    """``internal=False`` (the kube backend): NAT to the outside, for the pod's sidecars; the pod's own
    firewall confines the agent."""
    for _attempt in range(5):
        try:
            with _ALLOCATING, signals_deferred():
                subnet = _free_subnet(client)
                gateway = str(next(subnet.hosts()))
                created = client.networks.create(
                    name, driver="bridge", internal=internal, dns_enabled=False,
                    subnets=[{"subnet": str(subnet), "gateway": gateway}], labels=resource_labels(run_id))
                stack.push("network", live=lambda: _remove_network(client, name), name=name)
        except APIError as exc:
            if "subnet" in str(exc).lower():  # taken by someone else between our look and the create
                continue
            raise NetworkError(f"podman network create {name}: {exc}") from exc
        net = SandboxNetwork(name, str(subnet), gateway, created.attrs["network_interface"])
        _create_bridge(net, stack)
        return net
    raise NetworkError("no free /24 for the sandbox network in 10.89.100.0-10.89.249.0")


def _remove_network(client, name: str) -> None:
    """Through the API: ``podman network rm`` took ~45 ms more (the CLI starting up)."""
    try:
        client.networks.remove(name, force=True)
    except NotFound:
        pass


def _free_subnet(client) -> ipaddress.IPv4Network:
    taken = []
    for network in client.networks.list():
        for sub in network.attrs.get("subnets") or []:
            taken.append(ipaddress.ip_network(sub["subnet"], strict=False))
    routes = subprocess.run(["ip", "-4", "-o", "route", "show", "table", "all"], capture_output=True,
                            text=True).stdout
    for word in routes.split():
        try:
            taken.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    taken = [t for t in taken if t.version == 4 and t.prefixlen > 0]  # not the default route
    free = [s for s in SUBNET_POOL if not any(s.overlaps(t) for t in taken)]
    if not free:
        raise NetworkError("no free /24 for the sandbox network in 10.89.100.0-10.89.249.0")
    return random.choice(free)  # parallel runs rarely race for the same one


def _create_bridge(net: SandboxNetwork, stack: CleanupStack) -> None:
    if subprocess.run(["ip", "link", "show", net.bridge], capture_output=True).returncode == 0:
        raise NetworkError(f"bridge {net.bridge} already exists; run `mitmchaos cleanup`")
    with signals_deferred():
        _ip("link", "add", net.bridge, "type", "bridge")
        stack.push("bridge", name=net.bridge)
    prefix = ipaddress.ip_network(net.subnet).prefixlen
    _ip("addr", "add", f"{net.gateway}/{prefix}", "dev", net.bridge)
    _ip("link", "set", net.bridge, "up")


def apply_firewall(net: SandboxNetwork, proxy_port: int, repetition_id: str, stack: CleanupStack) -> None:
    """Let the bridge reach only the proxy and DNS on the gateway; reject everything else.

    Each family's rules go in as one atomic batch, and come out as one (cleanup.iptables_restore).
    """
    chain = chain_name(repetition_id)
    tag = ["-m", "comment", "--comment", rule_comment(repetition_id)]
    chain_rules = [*([chain, "-d", net.gateway, "-p", proto, "--dport", str(port), "-j", "ACCEPT"]
                     for proto, port in (("tcp", proxy_port), ("udp", DNS_PORT), ("tcp", DNS_PORT))),
                   [chain, "-j", "REJECT"]]
    own_chain = [f":{chain} - [0:0]", *(f"-A {' '.join(rule)}" for rule in chain_rules)]
    hooks = {
        "ipv4": [["INPUT", "-i", net.bridge, *tag, "-j", chain],
                 ["FORWARD", "-i", net.bridge, *tag, "-j", "REJECT"],
                 ["FORWARD", "-o", net.bridge, *tag, "-j", "REJECT"]],
        "ipv6": [["INPUT", "-i", net.bridge, *tag, "-j", "DROP"],
                 ["FORWARD", "-i", net.bridge, *tag, "-j", "DROP"]],
    }
    for family, rules in hooks.items():
        chain_here = chain if family == "ipv4" else None
        lines = (own_chain if chain_here else []) + [f"-I {rule[0]} 1 {' '.join(rule[1:])}" for rule in rules]
        with signals_deferred():
            result = iptables_restore(family, lines)
            if result.returncode != 0:
                raise NetworkError(f"{family} firewall for {net.bridge}: {result.stderr.strip()}")
            stack.push("firewall", family=family, rules=rules, chain=chain_here)


def _ip(*args: str) -> None:
    _check(["ip", *args])


def _check(cmd: list[str]) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)}: {result.stderr.strip()}")
