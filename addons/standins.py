"""StandIns: hosts the proxy answers itself, so experiments run hermetically.

Each plan ``stand_ins`` entry gets its own HTTP server on 127.0.0.1 (an ephemeral port),
started when the plan loads and stopped when mitmproxy shuts down. Matching requests are
routed there by rewriting the request's scheme, host and port while keeping its Host
header, so every fault addon earlier in the chain applies on top exactly as it would on a
real upstream (streamed responses included).

Kinds: ``dir`` (static files, relative to the plan's directory), ``flows`` (responses
replayed from a mitmproxy flows file, by method and path), ``handler`` (a Python function,
``module:function`` or ``file.py:function``). ``KINDS`` maps each kind to a factory
``(spec, plan_dir) -> server``; a server is anything with ``address`` and ``close()``.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import mimetypes
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from mitmproxy import ctx, exceptions, http
from mitmproxy.proxy import server_hooks

from mitmchaos.addons.state import pretty_host
from mitmchaos.globs import glob_matches
from mitmchaos.plan import StandIn

log = logging.getLogger(__name__)

STAND_IN = "mitmchaos.stand_in"  # flow.metadata key: the stand-in host pattern that answered the flow


class StandInError(Exception):
    pass


@dataclass
class StandInRequest:
    """What a handler receives."""

    method: str
    path: str  # with the query string
    headers: Message  # case-insensitive .get()
    body: bytes

    @property
    def host(self) -> str:
        """The host the client asked for (the Host header, without port)."""
        return urlsplit(f"//{self.headers.get('Host', '')}").hostname or ""


# A handler returns (status, headers, body); body is bytes, str, or an iterable of byte chunks
# (sent as they come, chunked). headers is a mapping or a list of (name, value) pairs.
Reply = tuple[int, Mapping[str, str] | Iterable[tuple[str, str]], bytes | str | Iterable[bytes]]
Responder = Callable[[StandInRequest], Reply]


class Served(Protocol):
    address: tuple[str, int]

    def close(self) -> None: ...


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LocalServer

    def _serve(self) -> None:
        request = StandInRequest(self.command, self.path, self.headers, self._read_body())
        try:
            status, headers, body = self.server.responder(request)
        except Exception as exc:  # a broken handler is the experiment's bug: show it, keep serving
            log.exception(f"stand-in handler failed on {self.command} {self.path}")
            status, headers, body = 500, {"Content-Type": "text/plain"}, f"stand-in handler failed: {exc!r}\n"
        self.send_response(status)
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        for name, value in pairs:
            self.send_header(name, value)
        if isinstance(body, str):
            body = body.encode()
        if isinstance(body, (bytes, bytearray)):
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in body:
            if chunk:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return body
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _serve

    def log_message(self, format: str, *args) -> None:
        log.debug("stand-in %s: " + format, self.server.name, *args)


class LocalServer(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 (ephemeral port) answering with ``responder``, in a thread."""

    daemon_threads = True

    def __init__(self, name: str, responder: Responder):
        super().__init__(("127.0.0.1", 0), _RequestHandler)
        self.name = name
        self.responder = responder
        self.address = self.server_address[:2]
        threading.Thread(target=self.serve_forever, name=f"stand-in {name}", daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


def _not_found(path: str) -> Reply:
    return 404, {"Content-Type": "text/plain; charset=utf-8"}, f"not found: {path}\n"


def dir_responder(root: Path) -> Responder:
    """Files under ``root``; a directory answers with its index.html. No listings."""
    root = root.resolve()
    if not root.is_dir():
        raise StandInError(f"dir {root} is not a directory")

    def respond(request: StandInRequest) -> Reply:
        target = (root / unquote(urlsplit(request.path).path).lstrip("/")).resolve()
        if target.is_dir():
            target = target / "index.html"
        if not target.is_relative_to(root) or not target.is_file():
            return _not_found(request.path)
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        return 200, {"Content-Type": kind}, target.read_bytes()

    return respond


# Recomputed by the local server, or no longer true of the decoded content it sends.
_NOT_REPLAYED = {"content-length", "transfer-encoding", "content-encoding", "connection", "keep-alive"}


def flows_responder(path: Path) -> Responder:
    """Recorded responses by (method, path), in recorded order; the last one repeats."""
    from mitmproxy import io

    try:
        flows = io.read_flows_from_paths([path])
    except exceptions.FlowReadException as exc:
        raise StandInError(f"cannot read flows file {path}: {exc}") from None
    recorded: dict[tuple[str, str], list[http.Response]] = {}
    for flow in flows:
        if isinstance(flow, http.HTTPFlow) and flow.response:
            recorded.setdefault((flow.request.method, flow.request.path), []).append(flow.response)
    if not recorded:
        raise StandInError(f"flows file {path} has no HTTP responses")
    lock = threading.Lock()

    def respond(request: StandInRequest) -> Reply:
        with lock:
            queue = recorded.get((request.method, request.path))
            if not queue:
                return _not_found(request.path)
            response = queue.pop(0) if len(queue) > 1 else queue[0]
        headers = [(k, v) for k, v in response.headers.items(multi=True) if k.lower() not in _NOT_REPLAYED]
        return response.status_code, headers, response.content or b""

    return respond


def load_handler(ref: str, plan_dir: Path) -> Responder:
    """``module:function`` or ``file.py:function`` (the file relative to the plan)."""
    target, _, name = ref.rpartition(":")
    if not target or not name:
        raise StandInError(f"handler {ref!r} must be 'module:function' or 'file.py:function'")
    try:
        if target.endswith(".py"):
            file = (plan_dir / target).resolve()
            spec = importlib.util.spec_from_file_location(f"mitmchaos_stand_in_{file.stem}", file)
            if spec is None or not file.is_file():
                raise StandInError(f"handler file {file} does not exist")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except StandInError:
        raise
    except Exception as exc:
        raise StandInError(f"cannot load handler {ref!r}: {exc!r}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise StandInError(f"handler {ref!r}: {target} has no function {name!r}")
    return function


def _scripted_model(spec: StandIn, plan_dir: Path) -> Served:
    from mitmchaos.scripted_model import ScriptedModelServer

    return ScriptedModelServer(spec.scripted_model)


KINDS: dict[str, Callable[[StandIn, Path], Served]] = {
    "dir": lambda spec, plan_dir: LocalServer(spec.host, dir_responder(plan_dir / spec.dir)),
    "flows": lambda spec, plan_dir: LocalServer(spec.host, flows_responder(plan_dir / spec.flows)),
    "handler": lambda spec, plan_dir: LocalServer(spec.host, load_handler(spec.handler, plan_dir)),
    "scripted_model": _scripted_model,
}


def kind_of(spec: StandIn) -> str:
    return next(kind for kind in KINDS if getattr(spec, kind, None) is not None)


class StandIns:
    def __init__(self, core) -> None:
        self.core = core
        self.routes: list[tuple[str, Served]] = []  # (host pattern, server), in plan order

    def configure(self, updated: set[str]) -> None:
        if "chaos_plan" not in updated:
            return
        self._stop()
        state = self.core.state
        if state is None:
            return
        plan_dir = Path(ctx.options.chaos_plan).resolve().parent
        for spec in state.plan.stand_ins:
            try:
                self.routes.append((spec.host, KINDS[kind_of(spec)](spec, plan_dir)))
            except StandInError as exc:
                self._stop()
                raise exceptions.OptionsError(f"stand-in {spec.host}: {exc}") from None
            log.info(f"mitmchaos: stand-in {spec.host} ({kind_of(spec)}) on {self.routes[-1][1].address}")

    def done(self) -> None:
        self._stop()

    def http_connect(self, flow: http.HTTPFlow) -> None:
        # Establish the tunnel ourselves: with connection_strategy=eager mitmproxy would
        # otherwise connect to the real host first, which need not exist.
        if flow.response or not self._server_for(flow.request.host):
            return
        flow.response = http.Response(flow.request.data.http_version, 200, b"Connection established",
                                      http.Headers(), b"", None, time.time(), time.time())

    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        # Same reason: eager mode also connects to the CONNECT target for a TLS handshake before
        # the client's. A stand-in host is never contacted, whatever its name resolves to.
        address = data.server.address
        if address and self._server_for(address[0]) and tuple(address) not in self._local_addresses():
            data.server.error = f"{address[0]} is a stand-in (answered by mitmchaos, never contacted)"

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.request.stream:  # a streamed body goes upstream before the request hook runs
            self._route(flow)

    def request(self, flow: http.HTTPFlow) -> None:
        self._route(flow)

    def _route(self, flow: http.HTTPFlow) -> None:
        if flow.response:
            return
        match = self._server_for(pretty_host(flow.request))
        if match is None:
            return
        pattern, server = match
        host_header = flow.request.host_header
        flow.request.scheme = "http"
        flow.request.host, flow.request.port = server.address
        flow.request.host_header = host_header
        flow.metadata[STAND_IN] = pattern

    def _local_addresses(self) -> set[tuple[str, int]]:
        return {tuple(server.address) for _, server in self.routes}

    def _server_for(self, host: str | None) -> tuple[str, Served] | None:
        return next(((p, s) for p, s in self.routes if glob_matches(p, host)), None)

    def _stop(self) -> None:
        for _, server in self.routes:
            server.close()
        self.routes = []
