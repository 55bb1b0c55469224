"""Redact: secrets never reach a saved flow (``-w`` / ``save_stream_file``) or mitmweb's stored view.

Headers are replaced in the ``response`` and ``error`` hooks, after the request went
upstream with its real credentials and before mitmproxy's own Save addon (which runs
after script addons) writes the flow. Never in ``request``: that would strip the key sent
upstream. Keep this addon last, so every other addon still sees the original headers.
"""

from __future__ import annotations

from mitmproxy import http

from mitmchaos.addons.headers import header, names, set_header

SECRET_HEADERS = ("authorization", "x-api-key", "api-key", "proxy-authorization", "cookie")
_SECRET_NAMES = frozenset(SECRET_HEADERS)
REDACTED = "REDACTED"


class Redact:
    def response(self, flow: http.HTTPFlow) -> None:
        self._redact(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._redact(flow)

    @staticmethod
    def _redact(flow: http.HTTPFlow) -> None:
        # the names present, from the index the other addons' lookups already built
        for name in _SECRET_NAMES.intersection(names(flow.request.headers)):
            set_header(flow.request.headers, name, REDACTED)
        if flow.response is not None and header(flow.response.headers, "set-cookie", None) is not None:
            set_header(flow.response.headers, "set-cookie", REDACTED)
