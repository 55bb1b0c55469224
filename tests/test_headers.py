"""The addons' header index (addons/headers.py) answers as mitmproxy's Headers does."""

import pytest
from mitmproxy import http

from mitmchaos.addons.headers import header, names, set_header

FIELDS = [
    (),
    ((b"Host", b"api.test"), (b"Accept-Encoding", b"gzip, br")),
    ((b"accept-encoding", b"gzip"), (b"X-One", b"1"), (b"ACCEPT-ENCODING", b"br"), (b"x-two", b"2")),
    ((b"Cookie", b"a=1"), (b"cookie", b"b=2"), (b"X-Caf\xc3\xa9", b"caf\xc3\xa9"), (b"x-bad", b"\xff\xfe")),
]


@pytest.mark.parametrize("fields", FIELDS)
@pytest.mark.parametrize("name, value", [("accept-encoding", "identity"), ("cookie", "REDACTED"),
                                         ("x-new", "caf\u00e9"), ("x-bad", "\udcff")])
def test_set_header_edits_the_fields_as_headers_setitem_does(fields, name, value):
    ours, theirs = http.Headers(fields), http.Headers(fields)
    header(ours, "host")  # an index of the old fields exists, and must not answer for the new ones
    set_header(ours, name, value)
    theirs[name] = value
    assert ours.fields == theirs.fields
    for key in {n.decode("utf-8", "surrogateescape").lower() for n, _ in theirs.fields} | {name, "absent"}:
        assert header(ours, key, None) == theirs.get(key)
    assert sorted(names(ours)) == sorted({k.lower() for k in theirs.keys()})


def test_an_index_follows_every_later_change_to_the_headers():
    headers = http.Headers(((b"Content-Type", b"text/plain"),))
    assert header(headers, "content-type") == "text/plain"
    headers["content-type"] = "application/json"
    assert header(headers, "content-type") == "application/json"
    set_header(headers, "content-type", "text/event-stream")
    headers.add("Content-Type", "x")
    assert header(headers, "content-type") == headers.get("content-type") == "text/event-stream, x"
