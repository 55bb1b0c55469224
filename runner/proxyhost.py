"""``mitmchaos proxy``: mitmproxy's proxy core with the mitmchaos addons, and only what they need.

mitmdump loads some forty addons (replay, map-local, the commands behind mitmproxy's UIs, ...)
and mitmproxy looks every event up on each of them, nested ones included: eight events per
proxied request. The runner's proxy needs a handful, so this host loads those and the suite,
and finds each event's handlers once instead of on every event. With the whole suite and a
plan it spends about two thirds of bare mitmdump's CPU per request (``make bench``).

The proxy itself is mitmproxy's: the same flows, options, certificates and log. Use
``mitmdump -s addons/chaos.py`` (or mitmweb) to combine the addons with mitmproxy's others.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import sys

from mitmproxy import addonmanager, exceptions, hooks, master, options
from mitmproxy.addons import (block, core, disable_h2c, dumper, errorcheck, next_layer, proxyserver, save,
                              termlog, tlsconfig, update_alt_svc)
from mitmproxy.tools import main as mitmproxy_main

from mitmchaos.addons import build_addons
from mitmchaos.addons.suite import Suite

log = logging.getLogger(__name__)

# options a user may give as flags, as mitmdump spells them; any other is --set name=value
FLAGS = {"mode": "m", "listen_host": None, "listen_port": "p", "save_stream_file": "w", "ssl_insecure": "k",
         "ignore_hosts": None, "allow_hosts": None, "flow_detail": None}


class HandlersOnce(addonmanager.AddonManager):
    """mitmproxy's addon manager, with each event's handlers listed once per set of addons.

    mitmproxy walks the addon tree (and enters a context manager per addon) on every event;
    here the walk happens the first time an event fires after an addon came or went. The
    handlers run in the same order, an error in one is logged and ends its addon's part (as
    ``safecall`` does), and ``AddonHalt`` ends the event. Nested addons are read at that walk:
    the host loads no scripts, whose addons come and go without the manager knowing.
    """

    def __init__(self, master) -> None:
        super().__init__(master)
        self.handlers: dict[str, list[list]] = {}  # event name -> per top-level addon, its handlers

    def register(self, addon):
        self.handlers.clear()
        return super().register(addon)

    def add(self, *addons) -> None:
        super().add(*addons)
        self.handlers.clear()  # the chain grows after each addon's register

    def remove(self, addon) -> None:
        super().remove(addon)
        self.handlers.clear()

    async def trigger_event(self, event: hooks.Hook) -> None:
        groups = self.handlers.get(event.name)
        if groups is None:
            groups = [found for addon in self.chain if (found := [f for _, f in self._iter_hooks(addon, event)])]
            self.handlers[event.name] = groups
        if not groups:
            return
        args = event.args()
        for handlers in groups:
            try:
                for handler in handlers:
                    result = handler(*args)
                    if result is not None and inspect.isawaitable(result):
                        await result
            except exceptions.AddonHalt:
                return
            except exceptions.OptionsError:
                raise
            except Exception as exc:  # noqa: BLE001 - what mitmproxy's safecall does: log it, go on
                log.error(f"Addon error: {exc}", exc_info=True)


class ChaosMaster(master.Master):
    """A mitmdump with the suite built in and without the addons a sandboxed run never uses."""

    def __init__(self, opts: options.Options) -> None:
        super().__init__(opts)  # without termlog: the manager it would be added to is replaced here
        self.addons = HandlersOnce(self)
        self._termlog_addon = termlog.TermLog()  # where Master looks for it at shutdown
        self.addons.add(
            self._termlog_addon,
            core.Core(),
            block.Block(),
            disable_h2c.DisableH2C(),
            proxyserver.Proxyserver(),
            next_layer.NextLayer(),
            tlsconfig.TlsConfig(),
            update_alt_svc.UpdateAltSvc(),
            Suite(build_addons()),
            save.Save(),
            dumper.Dumper(),
            errorcheck.ErrorCheck(),
        )

    async def run(self) -> None:
        if self.options.deferred:  # a --set no addon here declares: an error, so start-up stops
            log.error(f"unknown option(s): {', '.join(sorted(self.options.deferred))}. This proxy has "
                      "mitmproxy's core and the mitmchaos addons; for mitmproxy's others run "
                      "mitmdump -s addons/chaos.py")
        await super().run()


def make_parser(opts: options.Options) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mitmchaos proxy",
        description="mitmproxy with the mitmchaos addons built in. The addons' options are "
        "--set chaos_plan=PLAN, chaos_events=FILE, chaos_canary=..., chaos_run_id=...; "
        "--options lists them all.",
    )
    parser.add_argument("--version", action="store_true", help="show mitmproxy's version and exit")
    parser.add_argument("--options", action="store_true", help="show every option and its default, then exit")
    parser.add_argument("--commands", action="store_true", help="show every command, then exit")
    parser.add_argument("--set", dest="setoptions", default=[], action="append", metavar="option[=value]",
                        help="set an option (repeat for each)")
    parser.add_argument("-q", "--quiet", action="store_true", help="log errors only, no flows")
    parser.add_argument("-v", "--verbose", action="store_const", const="debug", help="log everything")
    for name, short in FLAGS.items():
        opts.make_parser(parser, name, short=short)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run until SIGINT or SIGTERM; a start-up error exits 1 (mitmproxy's ErrorCheck)."""
    mitmproxy_main.run(ChaosMaster, make_parser, sys.argv[1:] if argv is None else argv)
    return 0
