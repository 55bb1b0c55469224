"""`mitmchaos proxy` (runner/proxyhost.py): its addon manager dispatches as mitmproxy's does, and
the command refuses what it cannot honour. The runner's own tests drive it with real traffic:
every ChaosProxy there is one."""

from __future__ import annotations

import asyncio
import logging
import subprocess

import pytest
from mitmproxy import addonmanager, exceptions, hooks, master
from mitmproxy.test import tflow

from mitmchaos.proxy import console_script, free_port
from mitmchaos.proxyhost import HandlersOnce


class Recorder:
    """An addon that records its hook calls in a shared trace; optionally with children."""

    def __init__(self, name: str, trace: list, fail: bool = False, halt: bool = False, wait: bool = False,
                 children: tuple = ()) -> None:
        self.name, self.trace, self.fail, self.halt, self.wait = name, trace, fail, halt, wait
        self.addons = list(children)

    def request(self, flow) -> None:
        self.trace.append(self.name)
        if self.fail:
            raise ValueError(f"{self.name} broke")
        if self.halt:
            raise exceptions.AddonHalt()
        if self.wait:
            return self._later()
        return None

    async def _later(self) -> None:
        await asyncio.sleep(0)
        self.trace.append(f"{self.name} after await")

    async def response(self, flow) -> None:  # a coroutine hook
        self.trace.append(f"{self.name} response")


def tree(trace: list, **flags) -> list:
    """Three top-level addons, the second with nested children (as a script's addons are)."""
    return [
        Recorder("a", trace),
        Recorder("b", trace, children=(Recorder("b1", trace, **flags), Recorder("b2", trace))),
        Recorder("c", trace, wait=True),
    ]


def dispatch(manager_type: type, build, events: tuple[str, ...] = ("request", "response")) -> tuple[list, list]:
    """Fire ``events`` once through a manager of ``manager_type``; the trace and the errors logged."""

    async def go() -> tuple[list, list]:
        trace: list = []
        m = master.Master(None)
        m.addons = manager_type(m)
        m.addons.add(*build(trace))
        errors: list = []
        handler = _ListHandler(errors)
        logging.getLogger().addHandler(handler)
        try:
            flow = tflow.tflow()
            for name in events:
                hook = hooks.all_hooks[name]
                await m.addons.trigger_event(hook(flow))
        finally:
            logging.getLogger().removeHandler(handler)
            m._legacy_log_events.uninstall()  # a root log handler bound to this test's loop
        return trace, errors

    return asyncio.run(go())


class _ListHandler(logging.Handler):
    def __init__(self, out: list) -> None:
        super().__init__(logging.ERROR)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        self.out.append(record.getMessage())


@pytest.mark.parametrize("flags", [{}, {"fail": True}, {"halt": True}], ids=["plain", "error", "halt"])
def test_handlers_run_as_mitmproxys_own_manager_runs_them(flags):
    ours = dispatch(HandlersOnce, lambda trace: tree(trace, **flags))
    theirs = dispatch(addonmanager.AddonManager, lambda trace: tree(trace, **flags))
    assert ours == theirs
    trace, errors = ours
    if flags.get("fail"):  # logged; the rest of that addon's part skipped, the next addons run
        assert errors == ["Addon error: b1 broke"] and "b2" not in trace and "c" in trace
    if flags.get("halt"):  # the event ends there
        assert trace[:3] == ["a", "b", "b1"] and "c" not in trace[:4]
    if not flags:
        assert trace == ["a", "b", "b1", "b2", "c", "c after await",
                         "a response", "b response", "b1 response", "b2 response", "c response"]


def test_handlers_follow_addons_added_and_removed_after_an_event():
    async def go() -> list:
        trace: list = []
        m = master.Master(None)
        m.addons = HandlersOnce(m)
        first = Recorder("first", trace)
        m.addons.add(first)
        flow = tflow.tflow()
        await m.addons.trigger_event(hooks.all_hooks["request"](flow))
        m.addons.add(Recorder("second", trace))
        await m.addons.trigger_event(hooks.all_hooks["request"](flow))
        m.addons.remove(first)
        await m.addons.trigger_event(hooks.all_hooks["request"](flow))
        m._legacy_log_events.uninstall()
        return trace

    assert asyncio.run(go()) == ["first", "first", "second", "second"]


def test_an_option_no_addon_of_the_host_declares_stops_it_with_a_clear_error(tmp_path):
    out = subprocess.run([console_script("mitmchaos"), "proxy", "--listen-port", str(free_port()),
                          "--set", f"confdir={tmp_path}", "--set", "map_local=|x|/tmp"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "unknown option(s): map_local" in out.stdout + out.stderr
    assert "mitmdump -s addons/chaos.py" in out.stdout + out.stderr


def test_the_options_listing_has_the_addons_and_the_proxy_core_only(tmp_path):
    out = subprocess.run([console_script("mitmchaos"), "proxy", "--set", f"confdir={tmp_path}", "--options"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    for name in ("chaos_plan:", "chaos_events:", "listen_port:", "save_stream_file:", "mode:"):
        assert name in out
    assert "map_local:" not in out and "server_replay:" not in out


def test_a_bad_plan_stops_the_proxy_at_start_up(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: broken\nfaults:\n  - { id: llm.no_such_fault }\n")
    out = subprocess.run([console_script("mitmchaos"), "proxy", "--listen-port", str(free_port()),
                          "--set", f"confdir={tmp_path}", "--set", f"chaos_plan={plan}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "llm.no_such_fault" in out.stdout + out.stderr
