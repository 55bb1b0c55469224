"""Stand-ins: hosts answered by local servers behind a real mitmdump, reached with curl."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from mitmproxy import http, io
from mitmproxy.test import taddons, tflow, tutils

from mitmchaos.addons.core import ChaosCore
from mitmchaos.addons.standins import STAND_IN, StandIns, StandInError, load_handler
from tests.egress_support import HANDLERS, client_env, run, write_plan


def curl(proxy, url: str, *args: str):
    return run(["curl", "-sS", "--max-time", "20", *args, url], client_env(proxy))


@pytest.fixture
def site(tmp_path) -> Path:
    root = tmp_path / "site"
    (root / "docs").mkdir(parents=True)
    (root / "index.html").write_text("home\n")
    (root / "docs" / "a.txt").write_text("file a\n")
    (tmp_path / "secret.txt").write_text("outside the stand-in\n")
    return root


def test_dir_stand_in_serves_files_over_https_and_http(chaos_proxy, tmp_path, site):
    proxy = chaos_proxy(write_plan(tmp_path, stand_ins=[{"host": "*.docs.test", "dir": "site"}]))
    assert curl(proxy, "https://www.docs.test/").stdout == "home\n"
    assert curl(proxy, "https://www.docs.test/docs/a.txt?x=1").stdout == "file a\n"
    assert curl(proxy, "http://api.docs.test/docs/a.txt").stdout == "file a\n"
    missing = curl(proxy, "https://www.docs.test/nope", "-w", "%{http_code}")
    assert missing.stdout.endswith("404")
    escape = curl(proxy, "https://www.docs.test/..%2Fsecret.txt", "-w", "%{http_code}", "--path-as-is")
    assert "outside" not in escape.stdout and escape.stdout.endswith("404")


def test_eager_connection_strategy_never_contacts_the_real_host(chaos_proxy, tmp_path, site):
    # docs.test does not exist; eager mode would connect to it at the CONNECT unless the addon answers first
    proxy = chaos_proxy(write_plan(tmp_path, stand_ins=[{"host": "docs.test", "dir": "site"}]),
                        connection_strategy="eager")
    result = curl(proxy, "https://docs.test/docs/a.txt")
    assert result.stdout == "file a\n", result.stderr
    log = proxy.log_text()
    assert "server connect docs.test" not in log and "Name or service not known" not in log
    assert "docs.test is a stand-in (answered by mitmchaos, never contacted)" in log  # eager's TLS-first attempt


def test_handler_stand_in_gets_method_path_host_and_body(chaos_proxy, tmp_path):
    proxy = chaos_proxy(write_plan(tmp_path, stand_ins=[{"host": "echo.test", "handler": f"{HANDLERS}:echo"},
                                                        {"host": "broken.test", "handler": f"{HANDLERS}:broken"}]))
    result = curl(proxy, "https://echo.test/p?q=1", "-d", "x" * 10, "-i")
    assert "x-stand-in: echo" in result.stdout.lower()
    assert result.stdout.endswith("POST /p?q=1 host=echo.test body=10\n")
    broken = curl(proxy, "https://broken.test/", "-w", "%{http_code}")
    assert "handler bug" in broken.stdout and broken.stdout.endswith("500")


def test_streamed_bodies_pass_through_as_they_come(chaos_proxy, tmp_path):
    # stream_large_bodies makes mitmproxy stream both directions: the request is routed at its headers
    proxy = chaos_proxy(write_plan(tmp_path, stand_ins=[{"host": "stream.test", "handler": f"{HANDLERS}:slow_stream"},
                                                        {"host": "echo.test", "handler": f"{HANDLERS}:echo"}]),
                        stream_large_bodies="1")
    started = time.monotonic()
    result = curl(proxy, "https://stream.test/", "-N")
    assert result.stdout == "chunk 0\nchunk 1\nchunk 2\n" and time.monotonic() - started >= 0.4
    upload = curl(proxy, "https://echo.test/up", "--data-binary", "y" * 5000)
    assert upload.stdout.endswith("POST /up host=echo.test body=5000\n"), upload.stderr


def test_flows_stand_in_replays_recorded_responses_by_method_and_path(chaos_proxy, tmp_path):
    recorded = []
    for method, path, content in (("GET", "/v", b"first"), ("GET", "/v", b"second"), ("POST", "/v", b"posted")):
        flow = tflow.tflow(req=tutils.treq(method=method.encode(), path=path.encode(), host="rec.test"),
                           resp=tutils.tresp(content=content))
        recorded.append(flow)
    with open(tmp_path / "rec.mitm", "wb") as fh:
        writer = io.FlowWriter(fh)
        for flow in recorded:
            writer.add(flow)
    proxy = chaos_proxy(write_plan(tmp_path, stand_ins=[{"host": "rec.test", "flows": "rec.mitm"}]))
    got = [curl(proxy, "https://rec.test/v").stdout for _ in range(3)]
    assert got == ["first", "second", "second"]
    assert curl(proxy, "https://rec.test/v", "-X", "POST").stdout == "posted"
    assert curl(proxy, "https://rec.test/other", "-w", "%{http_code}").stdout.endswith("404")


def _configure(tmp_path, stand_ins):
    core = ChaosCore()
    stand = StandIns(core)
    plan = write_plan(tmp_path, stand_ins=stand_ins)
    return core, stand, plan


@pytest.mark.parametrize("stand_in, message", [
    ({"host": "d.test", "dir": "missing"}, "is not a directory"),
    ({"host": "f.test", "flows": "missing.mitm"}, "cannot read flows file"),
    ({"host": "h.test", "handler": "no_colon"}, "'module:function' or 'file.py:function'"),
    ({"host": "h.test", "handler": "json:no_such_function"}, "has no function 'no_such_function'"),
])
def test_bad_stand_ins_are_rejected_at_configure(tmp_path, stand_in, message):
    core, stand, plan = _configure(tmp_path, [stand_in])
    with taddons.context(core, stand) as tctx:
        with pytest.raises(Exception, match=message):
            tctx.configure(stand, chaos_plan=str(plan))


def test_handler_by_module_name(tmp_path):
    assert load_handler("json:dumps", tmp_path)([1]) == "[1]"
    with pytest.raises(StandInError, match="does not exist"):
        load_handler("nope.py:f", tmp_path)


def test_routing_keeps_the_host_header_and_skips_answered_flows(tmp_path, site):
    core, stand, plan = _configure(tmp_path, [{"host": "docs.test", "dir": "site"}])
    with taddons.context(core, stand) as tctx:
        tctx.configure(core, chaos_plan=str(plan))
        (_, server), = stand.routes
        flow = tflow.tflow(req=tutils.treq(host="docs.test", port=443, headers=http.Headers(host="docs.test")))
        flow.request.scheme = "https"
        stand.request(flow)
        assert (flow.request.scheme, flow.request.host, flow.request.port) == ("http", *server.address)
        assert flow.request.host_header == "docs.test" and flow.metadata[STAND_IN] == "docs.test"
        answered = tflow.tflow(req=tutils.treq(host="docs.test", headers=http.Headers(host="docs.test")),
                               resp=True)
        stand.request(answered)
        assert answered.request.host == "docs.test"
