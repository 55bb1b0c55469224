"""pytest plugin: run tests against a real mitmdump loaded with a mitmchaos plan.

    def test_agent_reports_rate_limit(chaos_proxy):
        proxy = chaos_proxy({"name": "t", ..., "faults": [{"id": "llm.rate_limit"}], ...})
        client = anthropic.Anthropic(http_client=anthropic.DefaultHttpxClient(proxy=proxy.url,
                                                                               verify=str(proxy.ca_path)))
        ...
        assert proxy.events("fault_injected")

``chaos_proxy(plan, **options)`` takes a plan file path or a dict (written to YAML for
you), starts mitmdump on a free loopback port with the addons, and stops it after the
test. Extra keyword arguments become ``--set`` options (``connection_strategy="lazy"``
is the default, so no upstream is contacted for answered flows).
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import yaml

from mitmchaos.decisions import new_canary
from mitmchaos.proxy import ChaosProxy


@pytest.fixture
def chaos_proxy(tmp_path_factory):
    started: list[ChaosProxy] = []

    def start(plan: str | Path | dict | None = None, **options) -> ChaosProxy:
        workdir = tmp_path_factory.mktemp("chaos-proxy")
        if isinstance(plan, dict):
            path = workdir / "plan.yaml"
            path.write_text(yaml.safe_dump(plan, sort_keys=False))
            plan = path
        options.setdefault("connection_strategy", "lazy")
        proxy = ChaosProxy(workdir=workdir, plan=Path(plan) if plan else None, canary=new_canary(),
                           run_id=f"pytest-{secrets.token_hex(4)}",
                           options={k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()})
        started.append(proxy)
        return proxy.start()

    yield start
    for proxy in started:
        proxy.stop()
