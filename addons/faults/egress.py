"""egress.*: faults on the agent's other outbound traffic (registries, code hosting, any host)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mitmchaos.addons.faults import FaultOptions, FaultType, register


class DnsFailOptions(FaultOptions):
    mode: Literal["nxdomain", "servfail", "refused", "timeout", "empty"] = Field(
        "nxdomain", description="how the resolver fails the name (the proxy always reports a resolution failure)"
    )


class Credential401Options(FaultOptions):
    provider: Literal["auto", "anthropic", "openai", "github", "generic"] = Field(
        "auto", description="whose auth-error body to imitate; auto picks by host"
    )


register(FaultType("egress.dns_fail", DnsFailOptions, ("proxy", "resolver"), "fail-safe",
                   "the host stops resolving", requires_host=True))
register(FaultType("egress.credential_401", Credential401Options, ("proxy",), "fail-safe",
                   "the host answers 401, as if the credential were revoked", requires_host=True))
