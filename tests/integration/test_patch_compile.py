"""The patched C++/CUDA lines compile with the real toolchains (g++; nvcc 13 = CCCL 3)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from fixture_sets import fixture_set

from cuforge.patching import apply

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = REPO / "tests" / "fixtures" / "upstream"

pytestmark = pytest.mark.slow


def patched_tree(tmp_path: Path, set_name: str, fixture: str) -> Path:
    root = tmp_path / set_name
    shutil.copytree(UPSTREAM / fixture, root)
    apply(fixture_set(set_name, root), root)
    return root


ABI_CHECK = """\
{first_line}
#include <string>
static_assert(_GLIBCXX_USE_CXX11_ABI == 1, "old std::string ABI");
int main() {{ std::string s = "abi"; return static_cast<int>(s.size()) - 3; }}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")
def test_force_abi_header_wins_over_command_line_abi0(tmp_path: Path) -> None:
    """FindTorch.cmake passes -D_GLIBCXX_USE_CXX11_ABI=0; the first include must override it."""
    src = patched_tree(tmp_path, "milo", "milo") / "submodules/tetra_triangulation/src"
    first_line = (src / "py_binding.cpp").read_text().splitlines()[0]
    assert first_line.startswith('#include "force_abi.h"')
    probe = src / "abi_probe.cpp"
    probe.write_text(ABI_CHECK.format(first_line=first_line))
    cmd = ["g++", "-std=c++17", "-fsyntax-only", "-D_GLIBCXX_USE_CXX11_ABI=0", str(probe)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # and without the header, the same flags give the old ABI: the test can fail
    probe.write_text(ABI_CHECK.format(first_line="// no force_abi.h"))
    assert subprocess.run(cmd, capture_output=True, text=True).returncode != 0


KERNEL = """\
#include <cstdint>
{includes}
#define BLOCK_X 16
#define BLOCK_Y 16

__global__ void max_contrib(uint32_t* out)
{{
    uint32_t last_contributor = threadIdx.x + threadIdx.y;
    typedef cub::BlockReduce<uint32_t, BLOCK_X, cub::BLOCK_REDUCE_WARP_REDUCTIONS, BLOCK_Y> BlockReduce;
    __shared__ typename BlockReduce::TempStorage temp_storage;
{reduce_line}
    if (threadIdx.x == 0 && threadIdx.y == 0) out[0] = last_contributor;
}}
"""


def cub_lines(forward_cu: str) -> tuple[str, str]:
    """The cub include block and the reduce line, as they are in (patched or not) forward.cu."""
    lines = forward_cu.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#include <cub/cub.cuh>"))
    end = start
    if lines[start + 1].startswith("// cuforge"):
        end = next(i for i in range(start, len(lines)) if lines[i].startswith("#endif"))
    reduce_line = next(line for line in lines if "BlockReduce(temp_storage).Reduce(last_contributor" in line)
    return "\n".join(lines[start : end + 1]), reduce_line


def nvcc_compile(tmp_path: Path, name: str, includes: str, reduce_line: str) -> subprocess.CompletedProcess:
    source = tmp_path / f"{name}.cu"
    source.write_text(KERNEL.format(includes=includes, reduce_line=reduce_line))
    cmd = ["nvcc", "-c", str(source), "-o", str(tmp_path / f"{name}.o")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_cub_max_patch_compiles_with_nvcc(tmp_path: Path) -> None:
    fixture = "milo/submodules/diff-gaussian-rasterization_ms"
    root = patched_tree(tmp_path, "diff-gaussian-rasterization_ms", fixture)
    includes, reduce_line = cub_lines((root / "cuda_rasterizer/forward.cu").read_text())
    assert "CUFORGE_MAX_OP" in reduce_line and "cuda::maximum<>{}" in includes
    done = nvcc_compile(tmp_path, "patched", includes, reduce_line)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_unpatched_cub_max_fails_with_cccl3(tmp_path: Path) -> None:
    """Control: the upstream line really breaks on this toolkit (else the test above proves little)."""
    version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    if "release 12." in version or "release 11." in version:
        pytest.skip("nvcc older than 13: CCCL 2 still has cub::Max")
    forward = UPSTREAM / "milo/submodules/diff-gaussian-rasterization_ms/cuda_rasterizer/forward.cu"
    includes, reduce_line = cub_lines(forward.read_text())
    done = nvcc_compile(tmp_path, "upstream", includes, reduce_line)
    assert done.returncode != 0 and "Max" in done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize(("archs", "request_", "sass", "ptx"), [
    ("121+PTX;120", "12.1+PTX;12.0", ["120", "121"], ["121"]),
    ("80-virtual", "8.0-virtual", [], ["80"])])
def test_flash_attn_arch_flags_give_that_device_code(tmp_path: Path, archs: str, request_: str,
                                                     sass: list[str], ptx: list[str]) -> None:
    """The patched flash-attn fixture's -gencode flags, on a tiny kernel with the real nvcc:
    the shared object holds exactly that SASS and PTX (cuforge's own fatbin reader), and the
    fatbin verification passes it against the cuforge arch list the recipe turned into them."""
    import json
    import sys

    from cuforge.config.arches import parse_arch_list
    from cuforge.verify.fatbin import check_fatbin, read_fatbin
    root = patched_tree(tmp_path, "flash-attn", "flash_attn")
    nvcc = shutil.which("nvcc")
    # setup.py asks $CUDA_HOME/bin/nvcc for its version only: the nvcc on PATH serves
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(Path(nvcc).parent.parent),
           "FLASH_ATTN_CUDA_ARCHS": archs}
    done = subprocess.run([sys.executable, "setup.py"], cwd=root, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    flags = json.loads(done.stdout)["nvcc"]
    gencode = flags[flags.index("-gencode"):]
    (tmp_path / "k.cu").write_text("__global__ void twice(float* x) { x[threadIdx.x] *= 2.f; }\n")
    so = tmp_path / "k.so"
    subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", *gencode, str(tmp_path / "k.cu"),
                    "-o", str(so)], check=True, capture_output=True, timeout=300)
    containers = read_fatbin(so)
    assert sorted({a.number for c in containers for a in c.sass}) == sass
    assert sorted({a.number for c in containers for a in c.ptx}) == ptx
    verdict = check_fatbin(so, parse_arch_list(request_))
    assert verdict.status == ("pass" if sass else "warn"), verdict.detail   # PTX only: JIT, a warn
    assert sass or "runs by PTX JIT from compute_80 at first load" in verdict.detail
    assert check_fatbin(so, parse_arch_list("12.1+PTX;12.0;9.0")).status == "fail"
