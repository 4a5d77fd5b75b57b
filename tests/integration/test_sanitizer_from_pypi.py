"""``--sanitize`` on a machine without a CUDA toolkit: the accel's PyPI compute-sanitizer
(envs/accels.toml ``sanitizer``), unpacked once under the state dir, can launch a program. PyPI's
13.0.48 to 13.3.75 cannot (no TreeLauncherSubreaper: every memcheck run on the H100 ended
"couldn't find exit code", session 23); 13.4.92 ran spconv's stress under memcheck with 0 errors
on the H100 (driver 580, CUDA 13.0; session 24). Downloads the real wheel (~18 MB)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cuforge.config.combos import load_accels
from cuforge.core.project import Project
from cuforge.env.unpacked import is_unpacked
from cuforge.pipeline.stress_stage import sanitizer_for
from cuforge.verify.stress import can_launch

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_without_a_toolkit_the_accels_pypi_sanitizer_is_unpacked_once_and_launches(
        tmp_path, monkeypatch):
    if shutil.which("compute-sanitizer", path="/usr/bin:/bin"):
        pytest.skip("this machine has a compute-sanitizer on /usr/bin: the fallback is not needed")
    monkeypatch.delenv("CUFORGE_COMPUTE_SANITIZER", raising=False)
    monkeypatch.setenv("CUFORGE_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")    # the wrapper needs readlink, dirname
    monkeypatch.setenv("PYTHONPATH", "")
    project = Project(REPO)
    accel = load_accels(project)["cu130"]
    empty = tmp_path / "empty"
    combo_env = SimpleNamespace(     # an env with no sanitizer in it, a toolkit without one
        combo=SimpleNamespace(accel=accel), python=Path(sys.executable),
        info=SimpleNamespace(site_packages=empty), toolkit=SimpleNamespace(root=empty))
    binary = sanitizer_for(project, combo_env)
    assert binary.is_relative_to(tmp_path / "state" / "tools") and can_launch(binary)
    assert is_unpacked(binary.parents[3])
    shown = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "Compute Sanitizer" in shown.stdout, shown.stderr
    # the second time it is found where it was unpacked: nothing installed again
    stamp = (binary.parents[3] / ".complete").stat().st_mtime_ns
    assert sanitizer_for(project, combo_env) == binary
    assert (binary.parents[3] / ".complete").stat().st_mtime_ns == stamp
