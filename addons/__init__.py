"""mitmchaos's mitmproxy addons, reusable in any mitmproxy setup.

    from mitmchaos.addons import Suite, build_addons
    addons = build_addons()          # the addons, in hook order
    suite = Suite(build_addons())    # the same as one addon: what addons/chaos.py hands to mitmdump

Each injecting addon takes the shared ``ChaosCore`` and declares ``handles``, the fault
ids it can inject; hooks run in list order, so the egress policy sits before every fault.
The classes are importable by name too (``from mitmchaos.addons import ChaosCore``).
"""

from __future__ import annotations

import importlib

# name -> module; resolved on first use so that importing the fault registry stays light
_EXPORTS = {
    "ChaosCore": "mitmchaos.addons.core",
    "ChaosState": "mitmchaos.addons.state",
    "EgressPolicy": "mitmchaos.addons.policy",
    "EgressFaults": "mitmchaos.addons.egress",
    "StandIns": "mitmchaos.addons.standins",
    "ModelAPI": "mitmchaos.addons.model_api",
    "ToolLedger": "mitmchaos.addons.ledger",
    "McpTraffic": "mitmchaos.addons.mcp",
    "DestructiveTier": "mitmchaos.addons.model_tools",
    "ToolResultFaults": "mitmchaos.addons.model_tools",
    "Redact": "mitmchaos.addons.redact",
    "Suite": "mitmchaos.addons.suite",
}


def build_addons() -> list:
    from mitmchaos.addons.core import ChaosCore
    from mitmchaos.addons.egress import EgressFaults
    from mitmchaos.addons.ledger import ToolLedger
    from mitmchaos.addons.mcp import McpTraffic
    from mitmchaos.addons.model_api import ModelAPI
    from mitmchaos.addons.model_tools import DestructiveTier, ToolResultFaults
    from mitmchaos.addons.policy import EgressPolicy
    from mitmchaos.addons.redact import Redact
    from mitmchaos.addons.standins import StandIns

    core = ChaosCore()
    ledger = ToolLedger(core)  # tool-call subscribers (classifier, tool-result faults) attach here
    mcp = McpTraffic(core)
    components: list = [
        EgressPolicy(core),  # first: faults never touch a flow it blocked
        EgressFaults(core),
        ModelAPI(core, ledger),
        DestructiveTier(core, ledger),
        mcp,
        ToolResultFaults(core, ledger, mcp),  # after ModelAPI: rewrites the request its ledger call just read
        # StandIns stays last (before any redaction addon): every fault applies before it routes a flow.
        StandIns(core),
        Redact(),  # last: every addon sees the real headers; saved flows hold none
    ]
    core.components = components
    return [core, *components]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)


__all__ = ["build_addons", *_EXPORTS]
