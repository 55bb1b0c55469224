"""EgressFaults: egress.dns_fail and egress.credential_401 in the proxy.

With HTTPS_PROXY set, a client never resolves the target itself: it sends CONNECT and the
proxy resolves. So the lookup failure is faked here, by answering the CONNECT (or a
plain-HTTP request) before any upstream connection; clients that resolve names themselves
meet the resolver (``mitmchaos resolver``) instead.
"""

from __future__ import annotations

from mitmproxy import http

from mitmchaos.addons.faults.egress import credential_401_response, credential_provider, dns_failure_response
from mitmchaos.addons.state import Target, pretty_host

DNS_FAIL = "egress.dns_fail"
CREDENTIAL_401 = "egress.credential_401"


class EgressFaults:
    handles = (DNS_FAIL, CREDENTIAL_401)

    def __init__(self, core) -> None:
        self.core = core

    def http_connect(self, flow: http.HTTPFlow) -> None:
        state = self.core.state
        if flow.response or state is None:
            return
        injection = state.consider((DNS_FAIL,), Target(host=flow.request.host), flow)
        if injection:
            self._fail_lookup(flow, injection)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        # Answered at the headers, before mitmproxy opens any upstream connection.
        state = self.core.state
        if flow.response or state is None:
            return
        # Inside a CONNECT tunnel (https) the lookup already happened at the CONNECT.
        ids = (DNS_FAIL, CREDENTIAL_401) if flow.request.scheme == "http" else (CREDENTIAL_401,)
        host = pretty_host(flow.request)
        injection = state.consider(ids, Target(host=host), flow)
        if injection is None:
            return
        if injection.id == DNS_FAIL:
            self._fail_lookup(flow, injection)
            return
        provider = credential_provider(host, injection.options.provider)
        flow.response = credential_401_response(host, provider, injection.canary)
        flow.comment = f"mitmchaos: {CREDENTIAL_401} ({provider})"
        injection.applied(status=401, provider=provider)

    @staticmethod
    def _fail_lookup(flow: http.HTTPFlow, injection) -> None:
        flow.response = dns_failure_response(flow.request.host, flow.request.port, injection.canary)
        flow.comment = f"mitmchaos: {DNS_FAIL}"
        injection.applied(status=502)
