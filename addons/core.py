"""ChaosCore: loads the plan, owns the events file and the shared ChaosState.

The other addons receive the core when they are built and read ``core.state``; it is
None while no plan is loaded, in which case they pass traffic through untouched.
"""

from __future__ import annotations

import logging
import secrets
from typing import Optional

from mitmproxy import ctx, exceptions

from mitmchaos import decisions
from mitmchaos.addons.state import ChaosState
from mitmchaos.events import EventWriter
from mitmchaos.plan import PlanError, load_plan

log = logging.getLogger(__name__)

OPTIONS = ("chaos_plan", "chaos_events", "chaos_run_id", "chaos_canary", "chaos_seed", "chaos_repetition")


class ChaosCore:
    def __init__(self) -> None:
        self.state: ChaosState | None = None
        self.components: list = []  # the addons that inject, each announcing itself on load

    def load(self, loader) -> None:
        loader.add_option("chaos_plan", str, "", "Path of the mitmchaos plan (experiment) YAML file.")
        loader.add_option("chaos_events", str, "", "Append events (JSON Lines) to this file; empty: no events file.")
        loader.add_option("chaos_run_id", str, "", "Run id written on every event; empty: a random one.")
        loader.add_option("chaos_canary", str, "",
                          f"Canary token carried by every injected error ({decisions.CANARY_PREFIX} and 8 hex "
                          "digits); empty: a random one.")
        loader.add_option("chaos_seed", Optional[int], None, "Override the plan's seed for fault decisions.")
        loader.add_option("chaos_repetition", int, 0, "Repetition index, an input of every fault decision.")

    def configure(self, updated: set[str]) -> None:
        if not updated & set(OPTIONS):
            return
        opts = ctx.options
        if opts.chaos_canary and not decisions.is_canary(opts.chaos_canary):
            raise exceptions.OptionsError(
                f"chaos_canary {opts.chaos_canary!r} must be {decisions.CANARY_PREFIX} and 8 lowercase hex digits")
        if opts.chaos_repetition < 0:
            raise exceptions.OptionsError("chaos_repetition must be 0 or more")
        if opts.chaos_seed is not None and opts.chaos_seed < 0:
            raise exceptions.OptionsError("chaos_seed must be 0 or more")
        if not opts.chaos_plan:
            self._set_state(None)
            return
        try:
            plan = load_plan(opts.chaos_plan)
        except PlanError as exc:
            # Logged rather than raised: mitmdump then exits 1 at start-up with the plan's own
            # file:line messages instead of a script traceback.
            log.error(f"chaos_plan is invalid:\n{exc}")
            self._set_state(None)
            return
        run_id = opts.chaos_run_id or f"adhoc-{secrets.token_hex(4)}"
        events = EventWriter(opts.chaos_events or None, run_id, "proxy")
        canary = opts.chaos_canary or decisions.new_canary()
        self._set_state(ChaosState(plan, events, canary, opts.chaos_repetition, opts.chaos_seed))
        log.info(f"mitmchaos: plan {plan.name!r} loaded, canary {canary}, run {run_id}")

    def _set_state(self, state: ChaosState | None) -> None:
        if self.state is not None:
            self.state.events.close()
        self.state = state
        if state is not None:
            handles = {fid for c in self.components for fid in getattr(c, "handles", ())}
            state.announce(handles)

    def running(self) -> None:
        # mitmproxy keeps unknown --set options silently; a misspelt chaos option must not be ignored.
        unknown = sorted(k for k in ctx.options.deferred if k.startswith("chaos_"))
        if unknown:
            log.error(f"unknown mitmchaos option(s): {', '.join(unknown)} (known: {', '.join(OPTIONS)})")

    def done(self) -> None:
        self._set_state(None)
