"""Reproducible wheels, for real (docs/reliability.md, "Reproducible wheels"): the demo (CMake)
built by two project copies, each with its own state (env, compiler cache) and build dir, gives
the same wheel bytes; a ``--rebuild`` starts from a fresh build dir and gives them again; a
torch-scatter-shaped setuptools package built in two state dirs, the same; a real nvcc compile
of one kernel file in two directories, the same object (slow: compiles)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuforge.core.atomic import EXECUTABLE, write_atomic
from cuforge.core.digest import sha256_of

ROOT = Path(__file__).resolve().parents[2]
COMBO_DIR = Path("linux-x86_64") / "cu130" / "torch2.14.1-cp311"
PROJECT = ("envs", "recipes", "patches", "smoke", "native", "stacks")
pytestmark = pytest.mark.slow


def _build(root: Path, work: Path, wheelhouse: Path, *extra: str) -> Path:
    env = {**os.environ, "CUFORGE_BUILD_DIR": str(work), "CUFORGE_WHEELHOUSE": str(wheelhouse)}
    env.pop("CUFORGE_STATE", None)   # each copy keeps its own .cuforge (env, compiler cache)
    out = subprocess.run([sys.executable, "-m", "cuforge", "--root", str(root), "build",
                          "--combo", "3.11-cu130", *extra], env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    (wheel,) = (wheelhouse / COMBO_DIR).glob("cuforge_demo-*.whl")
    return wheel


def test_two_copies_in_two_build_dirs_give_the_same_wheel_and_a_rebuild_starts_clean(tmp_path):
    copy = tmp_path / "another-clone"
    for part in PROJECT:
        shutil.copytree(ROOT / part, copy / part)
    one = _build(ROOT, tmp_path / "work-one", tmp_path / "wh-one")
    two = _build(copy, tmp_path / "elsewhere" / "work-two", tmp_path / "wh-two")
    assert sha256_of(one) == sha256_of(two), "the same demo sources gave two different wheels"
    # the readable manifest says the same; the journal's wheel fields too
    assert (one.parent / "manifest.txt").read_text() == (two.parent / "manifest.txt").read_text()
    lines = [json.loads((w.parent / "manifest.jsonl").read_text()) for w in (one, two)]
    assert lines[0]["wheel_sha256"] == lines[1]["wheel_sha256"] == sha256_of(one)

    # --rebuild: nothing of the last build is reused, and the same bytes come out
    build_dir = tmp_path / "work-one" / "3.11-cu130-torch2.14.1" / "cuforge-demo" / "build"
    (build_dir / "LEFT-BY-THE-LAST-BUILD").write_text("")
    again = _build(ROOT, tmp_path / "work-one", tmp_path / "wh-one", "--rebuild")
    assert not (build_dir / "LEFT-BY-THE-LAST-BUILD").exists()
    assert sha256_of(again) == sha256_of(two)


MULTI_EXT = """\
name = "multi-ext"
kind = "setuptools"
modules = ["multi_ext._alpha", "multi_ext._beta", "multi_ext._gamma"]

[source]
path = "{path}"
"""


def test_a_setuptools_package_in_two_state_dirs_gives_the_same_wheel(tmp_path):
    """torch's BuildExtension (PYTORCH_NVCC, the CXX script), whose .so is not stripped: its
    symbol table keeps nvcc's file names too. Both projects reuse the real combo env."""
    envs = [d for d in (ROOT / ".cuforge" / "envs").glob("3.11-cu130-*") if d.is_dir()]
    if not envs:
        pytest.skip("the 3.11-cu130 combo env is not created yet (run the demo build first)")
    wheels = []
    for where in ("one", "two/deeper"):
        proj = tmp_path / where / "proj"
        (proj / "recipes").mkdir(parents=True)
        (proj / "envs").symlink_to(ROOT / "envs")
        (proj / "recipes" / "multi-ext.toml").write_text(
            MULTI_EXT.format(path=ROOT / "tests" / "fixtures" / "recipes" / "multi_ext"))
        (proj / ".state" / "envs").mkdir(parents=True)
        for env_dir in envs:
            (proj / ".state" / "envs" / env_dir.name).symlink_to(env_dir)
        env = {**os.environ, "CUFORGE_ROOT": str(proj), "CUFORGE_STATE": str(proj / ".state"),
               "CUFORGE_WHEELHOUSE": str(proj / "wh")}
        env.pop("CUFORGE_BUILD_DIR", None)
        out = subprocess.run([sys.executable, "-m", "cuforge", "build", "--combo", "3.11-cu130",
                              "--only", "multi-ext", "--cuda-arch", "12.0", "--jobs", "2"],
                             env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-4000:]
        wheels += list((proj / "wh" / COMBO_DIR).glob("multi_ext-*.whl"))
    assert len(wheels) == 2 and sha256_of(wheels[0]) == sha256_of(wheels[1])


NVCC = Path("/usr/local/cuda/bin/nvcc")
KERNEL = """#include <cassert>
namespace { __device__ int twice(int x) { assert(x >= 0); return 2 * x; } }
__global__ void k(int* p) { p[threadIdx.x] = twice(threadIdx.x); }
const char* where() { return __FILE__; }
void launch(int* p) { k<<<1, 32>>>(p); }
"""


def _nvcc() -> str | None:
    return shutil.which("nvcc") or (str(NVCC) if NVCC.exists() else None)


@pytest.mark.skipif(_nvcc() is None, reason="no nvcc on this machine")
def test_nvcc_through_the_launcher_gives_the_same_object_from_two_directories(tmp_path):
    """The kernel sits in an anonymous namespace (its name carries cudafe++'s module id, made
    from the source's path) and asserts (``__FILE__`` in device code)."""
    from cuforge.pipeline.builders.reproducible import path_maps
    objects = []
    for where in ("one", "two/deeper"):
        work = tmp_path / where / "demo"
        (work / "src").mkdir(parents=True)
        (work / "src" / "k.cu").write_text(KERNEL)
        (work / "build").mkdir()
        launcher = write_atomic(*path_maps(work, "demo", project=tmp_path / where,
                                           site_packages=None, toolkit=None).launcher("CUDA"),
                                EXECUTABLE)
        subprocess.run([str(launcher), _nvcc(), "-O2", "-Xcompiler=-fPIC",
                        "-gencode", "arch=compute_120,code=[sm_120,compute_120]",
                        "-c", str(work / "src" / "k.cu"), "-o", str(work / "build" / "k.o")],
                       check=True, cwd=work / "build")
        objects.append((work / "build" / "k.o").read_bytes())
    assert objects[0] == objects[1]
    assert b"/cuforge/demo/src/k.cu" in objects[0] and b"tmpxft" not in objects[0]
