"""pytest plugin: run tests against a real proxy (`mitmchaos proxy`) loaded with a mitmchaos plan.

The package registers it (entry point ``pytest11``), so it is active wherever mitmchaos
is installed. Two ways in:

    @pytest.mark.chaos_plan({"name": "t", ..., "faults": [{"id": "llm.rate_limit"}], ...})
    def test_agent_reports_rate_limit(chaos):
        client = anthropic.Anthropic(http_client=anthropic.DefaultHttpxClient(proxy=chaos.url,
                                                                              verify=str(chaos.ca_path)))
        ...
        chaos.expect().fault_fired("llm.rate_limit")

    def test_many_plans(chaos_proxy):
        proxy = chaos_proxy("plans/llm-429.yaml", connection_strategy="lazy")

``chaos_proxy(plan, **options)`` takes a plan file path or a dict (written to YAML for
you), starts the proxy on a free loopback port with the addons, and stops it after the
test. Keyword arguments become ``--set`` options; ``connection_strategy=lazy`` is the
default, so flows the addons answer never contact an upstream. ``via_mitmdump=True`` runs the
addons under ``mitmdump -s`` instead, for the options of mitmproxy's other addons. The proxy
object has ``url``, ``ca_path``, ``canary``, ``events(type)``, ``env()`` and ``expect()``.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import yaml

from mitmchaos.decisions import new_canary
from mitmchaos.proxy import ChaosProxy


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "chaos_plan(plan, **options): run the test's `chaos` fixture under this plan")


@pytest.fixture
def chaos_proxy(tmp_path_factory):
    started: list[ChaosProxy] = []

    def start(plan: str | Path | dict | None = None, *, via_mitmdump: bool = False, **options) -> ChaosProxy:
        workdir = tmp_path_factory.mktemp("chaos-proxy")
        if isinstance(plan, dict):
            path = workdir / "plan.yaml"
            path.write_text(yaml.safe_dump(plan, sort_keys=False))
            plan = path
        options.setdefault("connection_strategy", "lazy")
        proxy = ChaosProxy(workdir=workdir, plan=Path(plan) if plan else None, canary=new_canary(),
                           run_id=f"pytest-{secrets.token_hex(4)}",
                           options={k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()},
                           via_mitmdump=via_mitmdump)
        started.append(proxy)
        return proxy.start()

    yield start
    for proxy in started:
        proxy.stop()


@pytest.fixture
def chaos(request, chaos_proxy) -> ChaosProxy:
    """The proxy for the test's ``@pytest.mark.chaos_plan(...)``."""
    marker = request.node.get_closest_marker("chaos_plan")
    if marker is None or not marker.args:
        raise pytest.UsageError(f"{request.node.nodeid}: the `chaos` fixture needs @pytest.mark.chaos_plan(plan)")
    return chaos_proxy(marker.args[0], **marker.kwargs)
