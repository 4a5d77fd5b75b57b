"""CMake's compiler detection kept and seeded into a fresh build dir (builders/cmake_seed.py), with
the combo env's real cmake and nvcc on a C/C++/CUDA project: the seeded configure skips
detection and writes the build.ninja CMake writes when it configures an existing build dir
again. Configure only (no compile): seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.pipeline.builders import cmake_seed  # noqa: E402

pytestmark = pytest.mark.skipif(vb.torch_python() is None, reason=vb.NO_TORCH)

PROJECT = """cmake_minimum_required(VERSION 3.24)
project(seeded LANGUAGES C CXX CUDA)
add_library(k SHARED k.cu host.cpp)
"""


@pytest.fixture
def tools():
    env_bin = vb.torch_python().parent
    nvcc = env_bin.parent / "cuda" / "bin" / "nvcc"
    if not (env_bin / "cmake").exists() or not nvcc.exists():
        pytest.skip("needs a combo env with cmake and its CUDA toolkit (cuda/bin/nvcc)")
    path = os.pathsep.join((str(env_bin), str(nvcc.parent), os.environ["PATH"]))
    return env_bin / "cmake", {"PATH": path, "CUDACXX": str(nvcc)}


def _configure(cmake: Path, src: Path, build: Path, env: dict) -> str:
    out = subprocess.run([str(cmake), "-S", str(src), "-B", str(build), "-G", "Ninja",
                          "-DCMAKE_CUDA_ARCHITECTURES=120-real"],
                         capture_output=True, text=True, env={**os.environ, **env})
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _ninja(build: Path) -> str:
    return (build / "build.ninja").read_text().replace(str(build), "<build>")


def test_a_seeded_fresh_build_dir_configures_as_an_existing_one(tmp_path, tools):
    cmake, env = tools
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(PROJECT)
    (src / "k.cu").write_text("__global__ void k() {}\n")
    (src / "host.cpp").write_text("int host() { return 1; }\n")
    first, seed = tmp_path / "first", tmp_path / "seeds" / "s"

    assert "compiler identification is" in _configure(cmake, src, first, env)
    assert cmake_seed.remember(first, seed)
    assert not cmake_seed.remember(first, seed)              # the first seed stays
    again = _configure(cmake, src, first, env)               # CMake's own rerun, for reference

    fresh = tmp_path / "fresh"
    assert cmake_seed.restore(fresh, seed)
    assert not cmake_seed.restore(fresh, seed)               # a build dir with a cache: left
    seeded = _configure(cmake, src, fresh, env)
    assert "compiler identification is" not in seeded and "Detecting" not in seeded
    assert "compiler identification is" not in again
    assert _ninja(fresh) == _ninja(first)
    cache = (fresh / "CMakeCache.txt").read_text()
    assert f"CMAKE_CUDA_COMPILER:FILEPATH={env['CUDACXX']}" in cache
    assert f"CMAKE_HOME_DIRECTORY:INTERNAL={src}" in cache


def test_the_seed_key_follows_compilers_flags_and_the_command(tmp_path, tools):
    _, env = tools
    argv = ("python", "-m", "pip", "wheel", "src")
    base = cmake_seed.seed_key(argv, env)
    assert base == cmake_seed.seed_key(argv, dict(env))
    assert cmake_seed.seed_key(argv, {**env, "CXXFLAGS": "-O1"}) != base
    assert cmake_seed.seed_key(argv, {**env, "CUDACXX": "/usr/bin/true"}) != base
    assert cmake_seed.seed_key((*argv, "--config-settings=cmake.define.X=1"), env) != base
