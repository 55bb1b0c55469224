"""A non-editable wheel carries the addons, the plans and the sandbox files."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_wheel_install_imports_addons_and_finds_plans(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True)
    (wheel,) = (tmp_path / "dist").glob("mitmchaos-*.whl")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True)
    code = ("import mitmchaos, mitmchaos.addons as a; from mitmchaos.addons import build_addons, ChaosCore;"
            "from mitmchaos.catalog import shipped_plans; from mitmchaos.proxy import addon_script;"
            "print(mitmchaos.__file__); print(addon_script()); print(len(build_addons()));"
            "print(sorted(p.name for p in shipped_plans()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(str(target)) and lines[1].startswith(str(target))
    assert "registry-down.yaml" in lines[3]
    installed = {p.relative_to(target / "mitmchaos").as_posix() for p in (target / "mitmchaos").rglob("*")
                 if "__pycache__" not in p.parts}
    source = {p.relative_to(ROOT).as_posix() for d in ("addons", "runner") for p in (ROOT / d).rglob("*.py")
              if "__pycache__" not in p.parts}
    mapped = {s.replace("runner/", "", 1) if s.startswith("runner/") else s for s in source}
    assert mapped <= installed, sorted(mapped - installed)
