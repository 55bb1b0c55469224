"""Suite: the addons of ``build_addons()`` as one mitmproxy addon (what addons/chaos.py loads).

For every event (eight per proxied request: four HTTP hooks, each followed by ``update``)
mitmproxy walks its whole addon tree, nested addons included, looking the hook up on each.
One object whose hooks call the addons' own, in list order, leaves one lookup per event
instead of one per addon. An exception ends the event's remaining hooks, as it does for
addons nested under one script. A hook may return an awaitable (mitmproxy awaits what a hook
returns): the rest then run after it, so a call that has nothing to wait for stays synchronous.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from mitmproxy import addonmanager, hooks, log  # noqa: F401  (a hook is known once its module is imported:
from mitmproxy.proxy import layers, mode_servers, server_hooks  # noqa: F401  these define them all)


class Suite:
    name = "mitmchaos"

    def __init__(self, addons: list) -> None:
        self.parts = addons
        for hook in hooks.all_hooks:
            handlers = [handler for addon in addons if callable(handler := getattr(addon, hook, None))]
            if handlers:
                setattr(self, hook, _in_order(handlers))


def _in_order(handlers: list[Callable]) -> Callable:
    if not any(inspect.iscoroutinefunction(handler) for handler in handlers):

        def call(*args) -> Awaitable | None:
            for i, handler in enumerate(handlers):
                result = handler(*args)
                if result is not None and inspect.isawaitable(result):
                    return _after(result, handlers[i + 1 :], args)
            return None

        return call

    # a coroutine hook among them: the Suite's is one too, which mitmproxy refuses for sync-only events
    async def call_async(*args) -> None:
        await _after(None, handlers, args)

    return call_async


async def _after(pending: Awaitable | None, handlers: list[Callable], args: tuple) -> None:
    if pending is not None:
        await pending
    for handler in handlers:
        result = handler(*args)
        if result is not None and inspect.isawaitable(result):
            await result
