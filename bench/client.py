"""The benchmark client: model calls shaped like an agent's, over one keep-alive connection per route."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from mitmchaos.proxy import ChaosProxy

from bench.proxies import trust

HEADERS = {"content-type": "application/json", "x-api-key": "sk-ant-bench", "anthropic-version": "2023-06-01"}


def message_body(stream: bool) -> bytes:
    return json.dumps(
        {
            "model": "claude-sonnet-4-6",
            "max_tokens": 1024,
            "stream": stream,
            "system": "You are a careful coding agent.",
            "messages": [
                {"role": "user", "content": "List the files in the repository and summarise the README."}
            ],
        }
    ).encode()


@dataclass
class Route:
    name: str
    connect: Callable[[], http.client.HTTPConnection]
    target: str  # what goes on the request line
    proxy_pid: int | None = None  # whose CPU time the route costs, besides client and upstream

    def send(self, conn: http.client.HTTPConnection, body: bytes) -> http.client.HTTPResponse:
        conn.request("POST", self.target, body=body, headers=HEADERS)
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"{self.name}: HTTP {response.status}: {response.read()[:200]!r}")
        return response


def in_turn[T](routes: list[T], turn: int) -> list[T]:
    """``routes`` starting at a different one each turn: no route always follows the same one."""
    shift = turn % len(routes)
    return routes[shift:] + routes[:shift]


def direct(upstream_url: str) -> Route:
    parts = urlsplit(upstream_url)
    return Route(
        "direct HTTP", lambda: http.client.HTTPConnection(parts.hostname, parts.port), "/v1/messages"
    )


def forward(name: str, proxy: ChaosProxy, upstream_url: str) -> Route:
    """Through ``proxy`` as an HTTP forward proxy (absolute-form request line)."""
    return Route(
        name,
        lambda: http.client.HTTPConnection(proxy.host, proxy.port),
        f"{upstream_url}/v1/messages",
        proxy.process.pid,
    )


def reverse_tls(name: str, proxy: ChaosProxy) -> Route:
    """TLS to ``proxy`` in reverse mode, trusting its CA."""
    return Route(
        name,
        lambda: http.client.HTTPSConnection(proxy.host, proxy.port, context=trust(proxy)),
        "/v1/messages",
        proxy.process.pid,
    )
