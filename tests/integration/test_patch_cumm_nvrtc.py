"""patches/cumm nvrtc-cccl-include: cumm's NVRTC options find CUDA 13's include/cccl.

spconv compiles the implicit-GEMM kernels it has no prebuilt copy of through NVRTC at run time;
on CUDA 13 that died with `cannot open source file "cuda/std/cassert"` (H100, 2026-12-05)."""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
from pathlib import Path

import pytest
from fixture_sets import fixture_tree


class BuildMeta:
    """The part of pccm's BuildMeta that create_nvrtc_code reads: one kernel's includes."""

    def __init__(self, *includes: Path) -> None:
        self.includes = list(includes)

    def get_global_cflags(self) -> dict[str, list[str]]:
        return {}

    def get_global_includes(self) -> list[Path]:
        return self.includes

    def get_local_includes(self) -> list[Path]:
        return []


def nvrtc_module(tmp_path: Path, patched: bool):
    root = fixture_tree("cumm", tmp_path / ("patched" if patched else "upstream"), patched)
    spec = importlib.util.spec_from_file_location(f"cumm_nvrtc_{root.name}",
                                                  root / "cumm/nvrtc/__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_toolkit(tmp_path: Path, cuda13: bool) -> Path:
    """<toolkit>/targets/x86_64-linux/include with cuda.h; CUDA 13 adds cccl/cuda/std/."""
    include = tmp_path / "cuda" / "targets" / "x86_64-linux" / "include"
    include.mkdir(parents=True)
    (include / "cuda.h").write_text("")
    if cuda13:
        (include / "cccl" / "cuda" / "std").mkdir(parents=True)
        (include / "cccl" / "cuda" / "std" / "cassert").write_text("")
    return include


def test_cuda13_toolkit_gets_its_cccl_dir_and_cxx17(tmp_path: Path) -> None:
    include, tensorview = fake_toolkit(tmp_path, cuda13=True), tmp_path / "tv"
    meta = BuildMeta(include, tensorview)
    opts, _ = nvrtc_module(tmp_path, patched=False).create_nvrtc_code(meta)
    assert opts == ["-std=c++14", "-I", str(include), "-I", str(tensorview)]

    opts, includes = nvrtc_module(tmp_path, patched=True).create_nvrtc_code(meta)
    assert opts == ["-std=c++17", "-I", str(include), "-I", str(tensorview),
                    "-I", str(include / "cccl")]
    assert includes == [str(include), str(tensorview), str(include / "cccl")]


def test_cuda12_toolkit_and_cpu_code_keep_upstreams_options(tmp_path: Path) -> None:
    cuda12 = BuildMeta(fake_toolkit(tmp_path / "12", cuda13=False), tmp_path / "tv")
    cuda13 = BuildMeta(fake_toolkit(tmp_path / "13", cuda13=True), tmp_path / "tv")
    upstream = nvrtc_module(tmp_path, patched=False)
    patched = nvrtc_module(tmp_path, patched=True)
    assert patched.create_nvrtc_code(cuda12) == upstream.create_nvrtc_code(cuda12)
    assert (patched.create_nvrtc_code(cuda13, cpu_code=True)
            == upstream.create_nvrtc_code(cuda13, cpu_code=True))
    assert (patched.create_nvrtc_code(cuda13, std="c++20")[0][0]
            == "-std=c++20")


# --- the real NVRTC -----------------------------------------------------------------------

def toolkit_roots() -> list[Path]:
    """Where cumm looks: the toolkit beside `which nvcc` (here it may be a wrapper script in
    /usr/local/bin), else /usr/local/cuda."""
    nvcc = shutil.which("nvcc")
    return [*([Path(nvcc).resolve().parent.parent] if nvcc else []), Path("/usr/local/cuda")]


def toolkit_include() -> Path | None:
    return next((root / "include" for root in toolkit_roots()
                 if (root / "include" / "cccl" / "cuda" / "std").is_dir()), None)


def find_libnvrtc() -> Path | None:
    """libnvrtc.so.13 of the toolkit, else of a torch cu130 env's nvidia/cu13 wheel."""
    roots = [root / "lib64" for root in toolkit_roots()]
    roots += sorted(Path(__file__).resolve().parents[2].glob(
        ".cuforge/envs/*cu13*/lib/python3*/site-packages/nvidia/cu13/lib"))
    return next((r / "libnvrtc.so.13" for r in roots if (r / "libnvrtc.so.13").exists()), None)


def nvrtc_compile(lib: ctypes.CDLL, source: str, opts: list[str]) -> tuple[int, str]:
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernel.cu", 0,
                                  None, None) == 0
    argv = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
    rc = lib.nvrtcCompileProgram(prog, len(opts), argv)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log.value.decode()


# what cumm's tensorview/core/nvrtc/core.h and limits.h include under NVRTC
KERNEL = """#include <cuda/std/cassert>
#include <cuda/std/cstdint>
extern "C" __global__ void k(int* p) { assert(p != nullptr); }
"""


@pytest.mark.slow
def test_real_nvrtc_compiles_cumms_includes_only_when_patched(tmp_path: Path) -> None:
    include, libnvrtc = toolkit_include(), find_libnvrtc()
    if include is None or libnvrtc is None:
        pytest.skip("needs a CUDA 13 toolkit on PATH and libnvrtc.so.13 (toolkit or torch cu130 env)")
    # libnvrtc dlopens libnvrtc-builtins from its own directory's search path
    ctypes.CDLL(str(next(libnvrtc.parent.glob("libnvrtc-builtins.so.13*"))), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(libnvrtc))
    meta = BuildMeta(include)

    opts, _ = nvrtc_module(tmp_path, patched=False).create_nvrtc_code(meta)
    rc, log = nvrtc_compile(lib, KERNEL, opts)
    assert rc != 0 and 'cannot open source file "cuda/std/cassert"' in log, log

    opts, _ = nvrtc_module(tmp_path, patched=True).create_nvrtc_code(meta)
    rc, log = nvrtc_compile(lib, KERNEL, opts)
    assert rc == 0, (opts, log)
