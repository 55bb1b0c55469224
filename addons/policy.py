"""EgressPolicy: the plan's allow and deny host patterns, in front of every fault.

It runs first among the addons, at the earliest hooks (``http_connect``, ``requestheaders``),
and marks blocked flows with ``BLOCKED``; ``ChaosState.consider`` never faults such a flow.
So a fault can fail, delay or change an allowed call, and never turn a block into an allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mitmproxy import http

from mitmchaos.addons.state import BLOCKED, pretty_host
from mitmchaos.globs import first_match

if TYPE_CHECKING:
    from mitmchaos.plan import EgressPolicy as PolicySpec


@dataclass(frozen=True)
class Verdict:
    host: str
    rule: str  # "deny:<pattern>" or "allow" (the allow list did not name the host)
    reason: str


def judge(policy: PolicySpec, host: str) -> Verdict | None:
    """Why the policy refuses ``host``, or None if it may be reached. Deny wins over allow."""
    denied = first_match(policy.deny, host)
    if denied is not None:
        return Verdict(host, f"deny:{denied}", f"{host} matches deny pattern {denied}")
    if policy.allow and first_match(policy.allow, host) is None:
        return Verdict(host, "allow", f"{host} is not in the allow list")
    return None


VERDICTS_KEPT = 4096  # hosts whose verdict is remembered; a plan's traffic reaches few


class EgressPolicy:
    def __init__(self, core) -> None:
        self.core = core
        self._judged: tuple[PolicySpec | None, dict[str, Verdict | None]] = (None, {})  # per policy

    def http_connect(self, flow: http.HTTPFlow) -> None:
        policy = self._policy(flow)
        if policy is not None:
            self._enforce(flow, policy, self._judge(policy, flow.request.host))

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        # Both the connection target and the Host header: a tunnel to an allowed host must not
        # carry requests for a refused one.
        policy = self._policy(flow)
        if policy is None:
            return
        target, named = flow.request.host, pretty_host(flow.request)
        verdict = self._judge(policy, target) or (self._judge(policy, named) if named != target else None)
        self._enforce(flow, policy, verdict)

    def _policy(self, flow: http.HTTPFlow) -> PolicySpec | None:
        state = self.core.state
        return None if flow.response or state is None else state.plan.policy

    def _enforce(self, flow: http.HTTPFlow, policy: PolicySpec, verdict: Verdict | None) -> None:
        if verdict is None:
            return
        state = self.core.state
        enforce = policy.mode == "enforce"
        state.events.emit("decision", kind="policy", action="block" if enforce else "observe",
                          host=verdict.host, rule=verdict.rule, reason=verdict.reason, mode=policy.mode)
        if not enforce:
            return
        flow.metadata[BLOCKED] = True
        flow.comment = f"mitmchaos: blocked by egress policy ({verdict.rule})"
        flow.response = http.Response.make(
            403, f"mitmchaos egress policy: blocked {verdict.host}: {verdict.reason} (rule {verdict.rule})\n",
            {"Content-Type": "text/plain; charset=utf-8"})
        flow.response.reason = f"Blocked by egress policy: {verdict.host} ({verdict.rule})"

    def _judge(self, policy: PolicySpec, host: str) -> Verdict | None:
        """``judge``, remembered: every request asks again about the same few hosts."""
        judged_policy, verdicts = self._judged
        if judged_policy is not policy or len(verdicts) >= VERDICTS_KEPT:
            verdicts = {}
            self._judged = (policy, verdicts)
        if host not in verdicts:
            verdicts[host] = judge(policy, host)
        return verdicts[host]
