"""The sandbox's DNS resolver: fails the plan's egress.dns_fail names, answers or forwards the rest.

Proxied clients never resolve their targets (the proxy does; see addons/egress.py). This
resolver is for everything in the sandbox that looks names up itself. It listens on UDP and
TCP at one address and port and, for a name that no fault takes:

- with ``upstream``: forwards the query there, and nowhere else;
- without: answers with one fixed address, by default the listen address, i.e. the sandbox's
  gateway, where the proxy listens. A client that ignores the proxy then connects to the
  gateway and meets the firewall, instead of learning a real address it could try to reach.

``localhost`` names are answered with loopback and never faulted or forwarded. Malformed
packets are dropped. Events (plan_loaded, dns_query, fault_injected) go to the events file
with component ``resolver``.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import signal
import socket
import socketserver
import struct
import threading

from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSError, DNSRecord

from mitmchaos.addons.state import ChaosState, Target

log = logging.getLogger(__name__)

DNS_FAIL = "egress.dns_fail"
MODE_RCODES = {"nxdomain": RCODE.NXDOMAIN, "servfail": RCODE.SERVFAIL, "refused": RCODE.REFUSED,
               "empty": RCODE.NOERROR}  # "timeout" sends nothing
NOT_FAULTED = object()
LOOPBACK = {"A": A("127.0.0.1"), "AAAA": AAAA("::1")}
TTL = 5  # short: a later repetition's plan must not be masked by a cached answer
TCP_IDLE_S = 10.0
UPSTREAM_TIMEOUT_S = 3.0
SHUTDOWN_POLL_S = 0.02


def parse_hostport(text: str, default_port: int | None = None) -> tuple[str, int]:
    """``ADDR:PORT``, ``[v6]:PORT``, or ``ADDR`` when a default port is given."""
    host, sep, port = text.rpartition(":")
    if text.startswith("[") and "]" in text:
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":")
    elif not sep or ":" in host:  # no port, or a bare IPv6 address
        host, port = text, ""
    if not port:
        if default_port is None:
            raise ValueError(f"{text!r}: give ADDR:PORT")
        port = str(default_port)
    ipaddress.ip_address(host)  # raises ValueError: names would need a resolver themselves
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: bad port")
    return host, int(port)


class Resolver:
    """Turns one DNS query into one reply (or none); no sockets of its own except to forward."""

    def __init__(self, state: ChaosState, answer: str | None = None, upstream: tuple[str, int] | None = None):
        if (answer is None) == (upstream is None):
            raise ValueError("give exactly one of answer (a fixed address) and upstream")
        self.state = state
        self.upstream = upstream
        self.answer = ipaddress.ip_address(answer) if answer else None
        self._deciding = threading.Lock()  # queries arrive on many threads; the fault counters are shared

    def handle(self, data: bytes, transport: str) -> bytes | None:
        try:
            query = DNSRecord.parse(data)
        except Exception as exc:  # dnslib raises many types on garbage; any of them means "drop it"
            log.debug(f"dropped a malformed {transport} packet ({len(data)} bytes): {exc!r}")
            return None
        if query.header.qr:  # a response, not a query: answering it could start a loop
            return None
        if len(query.questions) != 1:
            reply = query.reply()
            reply.header.rcode = RCODE.FORMERR
            return reply.pack()
        question = query.q
        name = str(question.qname).rstrip(".").lower()
        qtype = QTYPE.get(question.qtype, str(question.qtype))
        reply, faulted = self._reply(query, name, qtype, transport)
        rcode = RCODE.get(reply[3] & 0x0F) if reply and len(reply) > 3 else None  # header byte 3: rcode bits
        self.state.events.emit("dns_query", name=name, qtype=qtype, rcode=rcode, faulted=faulted,
                               transport=transport)
        return reply

    def _reply(self, query: DNSRecord, name: str, qtype: str, transport: str) -> tuple[bytes | None, bool]:
        if name == "localhost" or name.endswith(".localhost"):
            return self._fixed(query, qtype, LOOPBACK.get(qtype)), False
        rcode = self._injected_rcode(name, transport)
        if rcode is not NOT_FAULTED:
            if rcode is None:  # the timeout mode
                return None, True
            reply = query.reply()
            reply.header.rcode = rcode
            return reply.pack(), True
        if self.upstream is not None:
            return self._forward(query, transport), False
        record = None
        if qtype == "A" and self.answer.version == 4:
            record = A(str(self.answer))
        elif qtype == "AAAA" and self.answer.version == 6:
            record = AAAA(str(self.answer))
        return self._fixed(query, qtype, record), False

    def _injected_rcode(self, name: str, transport: str):
        """The rcode a dns_fail fault answers this lookup with (None: no reply), or NOT_FAULTED."""
        with self._deciding:
            injection = self.state.consider([DNS_FAIL], Target(host=name))
            if injection is None:
                return NOT_FAULTED
            mode = injection.options.mode
            rcode = MODE_RCODES.get(mode)
            injection.applied(mode=mode, rcode=RCODE.get(rcode) if rcode is not None else None,
                              transport=transport)
            return rcode

    @staticmethod
    def _fixed(query: DNSRecord, qtype: str, record) -> bytes:
        """An answer of ours: the record if there is one for this type, else NOERROR with no data."""
        reply = query.reply()
        if record is not None:
            reply.add_answer(RR(query.q.qname, getattr(QTYPE, qtype), rdata=record, ttl=TTL))
        return reply.pack()

    def _forward(self, query: DNSRecord, transport: str) -> bytes:
        try:
            host, port = self.upstream
            return query.send(host, port, tcp=transport == "tcp", timeout=UPSTREAM_TIMEOUT_S,
                              ipv6=":" in host)
        except (OSError, DNSError, struct.error) as exc:
            log.warning(f"upstream {self.upstream} failed for {query.q.qname}: {exc}")
            reply = query.reply()
            reply.header.rcode = RCODE.SERVFAIL
            return reply.pack()


class _UDPHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data, sock = self.request
        reply = self.server.resolver.handle(data, "udp")
        if reply is not None:
            sock.sendto(reply, self.client_address)


class _TCPHandler(socketserver.StreamRequestHandler):
    timeout = TCP_IDLE_S  # an idle or half-sent connection does not hold a thread for long

    def handle(self) -> None:
        try:
            while len(prefix := self.rfile.read(2)) == 2:
                (length,) = struct.unpack("!H", prefix)
                data = self.rfile.read(length)
                if len(data) < length:
                    return
                reply = self.server.resolver.handle(data, "tcp")
                if reply is not None:
                    self.wfile.write(struct.pack("!H", len(reply)) + reply)
        except OSError:
            return


def _server_class(base: type[socketserver.BaseServer], host: str) -> type:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return type(base.__name__, (socketserver.ThreadingMixIn, base),
                {"address_family": family, "daemon_threads": True, "allow_reuse_address": True})


class ResolverServer:
    """The resolver on UDP and TCP at ``listen``, served from background threads."""

    def __init__(self, resolver: Resolver, listen: tuple[str, int]):
        host, port = listen
        self.udp = _server_class(socketserver.UDPServer, host)((host, port), _UDPHandler)
        try:
            self.tcp = _server_class(socketserver.TCPServer, host)((host, port), _TCPHandler)
        except OSError:
            self.udp.server_close()
            raise
        for server in (self.udp, self.tcp):
            server.resolver = resolver
        # shutdown() waits for the loop's next poll; socketserver's default 0.5 s, twice, was
        # most of what stopping a repetition's helpers took
        self.threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S},
                                         name=f"dns-{n}", daemon=True)
                        for n, s in (("udp", self.udp), ("tcp", self.tcp))]

    def start(self) -> ResolverServer:
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        for server in (self.udp, self.tcp):
            server.shutdown()
            server.server_close()


def serve(state: ChaosState, listen: tuple[str, int], answer: str | None,
          upstream: tuple[str, int] | None) -> None:
    """Run until SIGTERM or SIGINT; plan_loaded is written once both sockets are bound."""
    if upstream is None and answer is None:
        if ipaddress.ip_address(listen[0]).is_unspecified:
            raise ValueError(f"listening on {listen[0]}: give --answer (the address to hand out) "
                             "or --upstream")
        answer = listen[0]
    # Taken with sigwait, not caught by a handler: an Event.set() handler deadlocked when a second
    # SIGTERM (the runner's stop and its cleanup each send one) arrived while the first one's set()
    # held the Event's lock. Blocked before the server threads start, so they inherit the mask;
    # it stays blocked, as the process ends when this returns.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    server = ResolverServer(Resolver(state, answer=answer, upstream=upstream), listen).start()
    try:
        state.announce([DNS_FAIL])
        log.info(f"resolver listening on {listen[0]}:{listen[1]} (udp, tcp); "
                 + (f"forwarding to {upstream[0]}:{upstream[1]}" if upstream else f"answering {answer}"))
        signal.sigwait(stop_signals)
    finally:
        server.stop()
        state.events.close()


def run(plan_path: str, events_path: str | None, listen: str, upstream: str | None, answer: str | None,
        run_id: str | None, canary: str | None, repetition: int, seed: int | None) -> None:
    """``mitmchaos resolver``: load the plan, then serve until SIGTERM. Raises ValueError or PlanError."""
    from mitmchaos import decisions
    from mitmchaos.events import EventWriter
    from mitmchaos.plan import load_plan

    if canary and not decisions.is_canary(canary):
        raise ValueError(f"--canary {canary!r} must be {decisions.CANARY_PREFIX} and 8 lowercase hex digits")
    if answer:
        ipaddress.ip_address(answer)
    listen_at = parse_hostport(listen)
    upstream_at = parse_hostport(upstream, default_port=53) if upstream else None
    plan = load_plan(plan_path)
    events = EventWriter(events_path, run_id or f"adhoc-{secrets.token_hex(4)}", "resolver")
    state = ChaosState(plan, events, canary or decisions.new_canary(), repetition, seed)
    serve(state, listen_at, answer, upstream_at)
