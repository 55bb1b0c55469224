"""The shipped key-free suite and sweep, end to end through the real runner and Podman."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mitmchaos import images
from tests.conftest import BIN, ROOT
from tests.sandboxed import require_podman, run_env

pytestmark = [pytest.mark.podman, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def sandbox_image():
    require_podman()
    images.ensure_image(images.default_image())


def run_batch(command: str, file: str, out: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(BIN / "mitmchaos"), command, "--scratch", "--repeat", "1", "--out", str(out), str(ROOT / file)],
        capture_output=True,
        text=True,
        env=run_env(out.parent),  # scratch projects and state under the test's own directory
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.timeout(900)
def test_shipped_suite_shares_one_baseline_and_shows_the_comparison_table(tmp_path):
    out = tmp_path / "suite.json"
    done = run_batch("suite", "plans/suites/offline-single-points.yaml", out)
    assert "baseline (shared)" in done.stdout
    runs = out.with_suffix("")
    assert sorted(p.relative_to(runs).as_posix() for p in runs.glob("*/baseline-*")) == [
        "vendor-package-baseline/baseline-1"
    ]  # once for the task, not once per fault set
    (task,) = json.loads(out.read_text())["tasks"]
    rows = {r["fault_set"]: r for r in task["rows"]}
    assert list(rows) == ["index-down", "model-rate-limited-once", "model-overloaded"]
    success = task["probes"].index("task_success")
    assert task["baseline"][success]["passes"] == 1
    for hurt in ("index-down", "model-overloaded"):  # the careful agent cannot vendor without either
        assert rows[hurt]["cells"][success]["below_baseline"], rows[hurt]
        assert rows[hurt]["verdict"] == "scored"
    assert rows["model-rate-limited-once"]["cells"][success]["faulted"]["passes"] == 1  # the SDK retried
    for row in rows.values():
        run = json.loads((runs / row["plan"] / "run.json").read_text())
        assert [r["artifacts"] for r in run["records"]] == [
            "../vendor-package-baseline/baseline-1",
            "faulted-1",
        ]
        assert (out.parent / row["report"]).is_file()
    html = out.with_suffix(".html").read_text()
    assert html.count('<table class="compare">') == 1
    for name in rows:
        assert f'<a href="suite/vendor-package-{name}.html">{name}</a>' in html


@pytest.mark.timeout(900)
def test_shipped_sweep_draws_the_curve_with_its_breaking_point(tmp_path):
    out = tmp_path / "sweep.json"
    done = run_batch("sweep", "plans/sweeps/offline-retry-budget.yaml", out)
    assert "breaking point: times = 3" in done.stdout
    runs = out.with_suffix("")
    assert len(list(runs.glob("*/baseline-*"))) == 1
    data = json.loads(out.read_text())
    # The reference agent's SDK retries a failed call twice: two 503s are ridden out, the third is not.
    assert [p["value"] for p in data["points"]] == [1, 2, 3, 4]
    success = data["probes"].index("task_success")
    assert [p["probes"][success]["faulted"]["passes"] for p in data["points"]] == [1, 1, 0, 0]
    assert data["breaking_value"] == 3 and data["shape"] == "cliff-edge"
    html = out.with_suffix(".html").read_text()
    assert "<h2>Resilience curve</h2>" in html and html.count("<svg") == 1
    assert ">breaks at 3</text>" in html and html.count("<polyline") == 1 + len(data["probes"])
