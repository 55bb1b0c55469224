"""Redact: secrets never reach a saved flow (``-w`` / ``save_stream_file``) or mitmweb's stored view.

Headers are replaced in the ``response`` and ``error`` hooks, after the request went
upstream with its real credentials and before mitmproxy's own Save addon (which runs
after script addons) writes the flow. Never in ``request``: that would strip the key sent
upstream. Keep this addon last, so every other addon still sees the original headers.
"""

from __future__ import annotations

from mitmproxy import http

SECRET_HEADERS = ("authorization", "x-api-key", "api-key", "proxy-authorization", "cookie")
_SECRET_NAMES = frozenset(name.encode() for name in SECRET_HEADERS)
REDACTED = "REDACTED"


class Redact:
    def response(self, flow: http.HTTPFlow) -> None:
        self._redact(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._redact(flow)

    @staticmethod
    def _redact(flow: http.HTTPFlow) -> None:
        # one pass over the raw fields: a lookup per secret name costs a pass each
        present = {name.lower() for name, _ in flow.request.headers.fields} & _SECRET_NAMES
        for name in present:
            flow.request.headers[name.decode()] = REDACTED
        if flow.response is not None and "set-cookie" in flow.response.headers:
            flow.response.headers["set-cookie"] = REDACTED
