"""mitmchaos's mitmproxy addons, reusable in any mitmproxy setup.

    from mitmchaos.addons import build_addons
    addons = build_addons()          # what addons/chaos.py hands to mitmdump

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
}


def build_addons() -> list:
    from mitmchaos.addons.core import ChaosCore

    core = ChaosCore()
    components: list = []
    core.components = components
    return [core, *components]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)


__all__ = ["build_addons", *_EXPORTS]
