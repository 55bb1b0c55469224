"""egress.*: faults on the agent's other outbound traffic (registries, code hosting, any host)."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field

from mitmchaos.addons.faults import FaultOptions, FaultType, register
from mitmchaos.globs import first_match


class DnsFailOptions(FaultOptions):
    mode: Literal["nxdomain", "servfail", "refused", "timeout", "empty"] = Field(
        "nxdomain",
        description="how the resolver fails the name (the proxy always reports a resolution failure)",
    )


class Credential401Options(FaultOptions):
    provider: Literal["auto", "anthropic", "openai", "github", "generic"] = Field(
        "auto", description="whose auth-error body to imitate; auto picks by host"
    )


register(FaultType("egress.dns_fail", DnsFailOptions, ("proxy", "resolver"), "fail-safe",
                   "the host stops resolving", requires_host=True))
register(FaultType("egress.credential_401", Credential401Options, ("proxy",), "fail-safe",
                   "the host answers 401, as if the credential were revoked", requires_host=True))


# ---------------------------------------------------------------- injectors (used by addons/egress.py)
# They build mitmproxy responses; mitmproxy is imported inside them so that loading the
# catalog (plan validation, `mitmchaos list`, the resolver) stays light.

NAME_NOT_KNOWN = "Name or service not known"  # getaddrinfo's EAI_NONAME text, as real clients print it


def dns_failure_response(host: str, port: int, canary: str):
    """A 502 whose reason phrase reads as a failed lookup: pip and npm print the reason.

    The canary goes into the reason too, because the reason is all those clients show.
    """
    from mitmproxy import http

    reason = f"DNS resolution failed: {host}: {NAME_NOT_KNOWN} [{canary}]"
    body = f"Cannot connect to {host}:{port}: [Errno -2] {NAME_NOT_KNOWN} (DNS resolution failed) [{canary}]"
    response = http.Response.make(502, body + "\n", {"Content-Type": "text/plain; charset=utf-8"})
    response.reason = reason
    return response


# auto: the provider whose error body a host gets, by host glob
PROVIDER_HOSTS = (("*anthropic*", "anthropic"), ("*openai*", "openai"), ("*github*", "github"))


def credential_provider(host: str, provider: str) -> str:
    if provider != "auto":
        return provider
    pattern = first_match([p for p, _ in PROVIDER_HOSTS], host)
    return dict(PROVIDER_HOSTS)[pattern] if pattern else "generic"


def credential_401_response(host: str, provider: str, canary: str):
    """The host's own 401 for a revoked credential, in the shape its clients parse, canary included."""
    from mitmproxy import http

    revoked = f"the credential for {host} was revoked [{canary}]"
    headers = {"Content-Type": "application/json"}
    if provider == "anthropic":
        body = {"type": "error",
                "error": {"type": "authentication_error", "message": f"invalid x-api-key: {revoked}"}}
    elif provider == "openai":
        body = {"error": {"message": f"Incorrect API key provided: {revoked}",
                          "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}
    elif provider == "github":
        body = {"message": f"Bad credentials: {revoked}", "documentation_url": "https://docs.github.com/rest",
                "status": "401"}
    else:
        headers["WWW-Authenticate"] = (f'Bearer realm="{host}", error="invalid_token", '
                                       f'error_description="The access token was revoked"')
        body = {"error": "invalid_token", "error_description": revoked}
    return http.Response.make(401, json.dumps(body), headers)
