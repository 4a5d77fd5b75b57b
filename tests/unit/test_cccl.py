"""The CCCL a build compiles against (cuforge.env.cccl): which version a search path sees, which
versions carry a known fault (data/cccl.toml), the overlay a cu130 build puts first, and, with
the real wheel and the real nvcc, that the overlay is what a compile sees."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge.env import cccl


def _cub(root: Path, number: int) -> Path:
    (root / "cub").mkdir(parents=True)
    (root / "cub" / "version.cuh").write_text(f"#pragma once\n#define CUB_VERSION {number}\n")
    return root


def test_the_first_cub_on_the_path_wins_and_a_toolkits_cccl_dir_comes_last(tmp_path):
    overlay = _cub(tmp_path / "overlay", 300104)
    toolkit = tmp_path / "cuda" / "include"
    _cub(toolkit / "cccl", 300001)            # CUDA 13's layout: nvcc's -isystem include/cccl
    assert cccl.version_in([toolkit]) == "3.0.1"
    assert cccl.version_in([overlay, toolkit]) == "3.1.4"
    assert cccl.version_in([toolkit, overlay]) == "3.1.4"   # CPATH dirs before -isystem
    cuda12 = _cub(tmp_path / "cuda12" / "include", 200800)   # CUDA 12: cub/ in include/
    assert cccl.version_in([cuda12, overlay]) == "2.8.0"
    assert cccl.version_in([tmp_path / "none"]) == ""


def test_known_faults_by_version():
    assert cccl.known_faults("3.0.1")[0].startswith("NVIDIA/cccl#5297: CUB's merge sort")
    assert cccl.known_faults("2.8.0")
    assert cccl.known_faults("3.1.4") == [] and cccl.known_faults("2.7.0") == []
    assert cccl.known_faults("") == []


def test_the_variable_overrides_the_accel(monkeypatch):
    monkeypatch.delenv("CUFORGE_CCCL_OVERLAY", raising=False)
    assert cccl.overlay_spec("nvidia-cuda-cccl==13.1.115") == "nvidia-cuda-cccl==13.1.115"
    monkeypatch.setenv("CUFORGE_CCCL_OVERLAY", "off")
    assert cccl.overlay_spec("nvidia-cuda-cccl==13.1.115") == ""
    monkeypatch.setenv("CUFORGE_CCCL_OVERLAY", "nvidia-cuda-cccl==13.2.27")
    assert cccl.overlay_spec("") == "nvidia-cuda-cccl==13.2.27"


def test_cu130_takes_a_fixed_cccl():
    from cuforge.config.combos import load_accels
    from cuforge.core.project import find_project
    accel = load_accels(find_project(root=Path(__file__).resolve().parents[2]))["cu130"]
    version = accel.cccl_overlay.split("==")[1]
    assert accel.cccl_overlay.startswith("nvidia-cuda-cccl==") and version.startswith("13.1")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc here")
def test_a_real_compile_sees_the_overlay(tmp_path):
    """The real wheel installed (uv or pip) and nvcc's own preprocessing: without the overlay
    CUDA 13.0's CUB, with it on CPATH the overlay's."""
    inc = cccl.ensure_overlay(tmp_path / "state", "nvidia-cuda-cccl==13.1.115", Path(sys.executable))
    assert cccl.version_in([inc]) == "3.1.4"
    assert cccl.ensure_overlay(tmp_path / "state", "nvidia-cuda-cccl==13.1.115",
                               Path("/nonexistent/python")) == inc   # installed once
    src = tmp_path / "v.cu"
    src.write_text("#include <cub/version.cuh>\nint cub_version = CUB_VERSION;\n")

    def seen(extra: dict[str, str]) -> int:
        out = subprocess.run(["nvcc", "-E", "-x", "cu", str(src)], capture_output=True, text=True,
                             env={**os.environ, **extra}, check=True).stdout
        return int(re.search(r"int cub_version =(?:\s|#[^\n]*\n)*(\d+)", out)[1])   # line markers between

    base = seen({})
    assert base // 100 == 3000               # CUDA 13.0's CCCL 3.0.x
    assert seen({"CPATH": str(inc)}) == 300104
