"""native/cmake/CuforgeTorch.cmake takes torch's facts from cuforge (the env check has already
probed the interpreter) instead of importing torch again at every configure. Shown with an
interpreter that has no torch: configure passes with the facts given, and fails without them.
Configure only (no compile): seconds."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.pipeline.builders.cmake import torch_defines  # noqa: E402
from cuforge.env.torchinfo import probe_interpreter  # noqa: E402

pytestmark = pytest.mark.skipif(vb.torch_python() is None, reason=vb.NO_TORCH)


def _configure(tmp: Path, python: Path, defines: dict[str, str]) -> subprocess.CompletedProcess:
    env_bin = vb.torch_python().parent                 # the combo env: its cmake, ninja, nvcc
    cuda_bin = env_bin.parent / "cuda" / "bin"
    argv = [str(env_bin / "cmake"), "-S", str(ROOT / "native" / "demo"), "-B", str(tmp), "-G",
            "Ninja", f"-DPython_EXECUTABLE={python}", "-DCMAKE_CUDA_ARCHITECTURES=120-real",
            f"-DCMAKE_CUDA_COMPILER={cuda_bin / 'nvcc'}",
            *(f"-D{k}={v}" for k, v in defines.items())]
    path = os.pathsep.join((str(env_bin), str(cuda_bin), os.environ["PATH"]))
    return subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PATH": path})


def test_configure_uses_the_probed_facts_and_never_imports_torch(tmp_path):
    if not (vb.torch_python().parent.parent / "cuda" / "bin" / "nvcc").exists():
        pytest.skip("needs a combo env with its CUDA toolkit (cuda/bin/nvcc)")
    bare = tmp_path / "bare"                            # an interpreter without torch
    venv.EnvBuilder(with_pip=False).create(bare)
    facts = dict(torch_defines(probe_interpreter(vb.torch_python())))

    given = _configure(tmp_path / "given", bare / "bin" / "python", facts)
    assert given.returncode == 0, given.stdout[-2000:] + given.stderr[-2000:]
    torch_version = facts["CUFORGE_TORCH_VERSION"]
    assert f"cuforge: torch {torch_version}, C++20, _GLIBCXX_USE_CXX11_ABI=1" in given.stdout

    asked = _configure(tmp_path / "asked", bare / "bin" / "python", {})
    assert asked.returncode != 0
    assert "cannot import torch" in asked.stdout + asked.stderr
