pytest_plugins = ["pytester"]

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

VALID_PLAN = """\
name: t
agent: echo hi
verify: "true"
faults:
  - id: llm.rate_limit
probes:
  - id: task_success
abort:
  - cost_usd_above: 1
"""


@pytest.fixture
def plan_file(tmp_path):
    def write(text: str, name: str = "plan.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def cli_env() -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
