"""Every recipe's smoke script follows the protocol on a machine without a GPU: it exits 77
and says "skipped: no GPU" before importing its package (so it never passes by default)."""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path

import pytest

from cuforge.core.project import find_project
from cuforge.config.recipes import load_recipes

ROOT = Path(__file__).resolve().parents[2]


def _torch_python() -> Path | None:
    for candidate in (os.environ.get("CUFORGE_TEST_TORCH_PYTHON"), "/tmp/tenv/bin/python"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


@cache
def _gpu_visible(python: Path) -> bool:
    probe = subprocess.run([str(python), "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, timeout=300)
    return probe.stdout.strip() != "False"


def _scripts() -> list[Path]:
    project = find_project(ROOT)
    # GPU-free smoke tests (tetra-triangulation) run without a device and are not checked here
    paths = {r.smoke.path(project, r.name) for r in load_recipes(project).values()
             if r.kind != "prebuilt" and r.smoke.gpu}
    return sorted(paths)


@pytest.mark.parametrize("script", _scripts(), ids=lambda p: p.name)
def test_smoke_script_skips_without_a_gpu(script: Path):
    python = _torch_python()
    if python is None:
        pytest.skip("no python with torch (set CUFORGE_TEST_TORCH_PYTHON)")
    assert script.is_file(), script
    if _gpu_visible(python):
        pytest.skip("a GPU is visible: the no-GPU path cannot be checked here")
    proc = subprocess.run([str(python), str(script)], capture_output=True, text=True,
                          timeout=300, cwd=script.parent.parent)
    assert proc.returncode == 77, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "skipped: no GPU"
