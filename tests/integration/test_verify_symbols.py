"""Check 2 on real libraries: a .so with one deliberately undefined symbol and one that
libhelper.so (DT_NEEDED, found through a lib dir) provides; CUDA runtime major checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.verify.symbols import LibrarySet, check_cudart, check_symbols, resolve  # noqa: E402

pytestmark = pytest.mark.skipif(not vb.have("g++"), reason="needs g++")


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, Path]:
    helper_dir = tmp_path_factory.mktemp("helper")
    ext_dir = tmp_path_factory.mktemp("ext")
    helper = vb.gxx_shared(["helper.cpp"], helper_dir / "libhelper.so")
    # no -Wl,--no-undefined: the link succeeds with missing::not_defined_anywhere unresolved
    ext = vb.gxx_shared(["unresolved.cpp"], ext_dir / "unresolved.so", f"-L{helper_dir}", "-lhelper")
    return {"helper": helper, "ext": ext, "helper_dir": helper_dir}


def test_reports_exactly_the_missing_symbol_demangled(libs):
    with LibrarySet([libs["helper_dir"]]) as search:
        result = check_symbols(libs["ext"], search, python=vb.this_python())
    assert result.status == "fail"
    assert result.summary == ("1 undefined symbol no library provides: "
                              "missing::not_defined_anywhere(std::__cxx11::basic_string<char, "
                              "std::char_traits<char>, std::allocator<char> > const&)")
    assert "helper::add" not in result.detail  # resolved through DT_NEEDED + the lib dir


def test_resolution_follows_dt_needed_into_the_lib_dir(libs):
    with LibrarySet([libs["helper_dir"]]) as search:
        res = resolve(libs["ext"], search, python=vb.this_python())
    assert res.unresolved == ("_ZN7missing20not_defined_anywhereERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",)
    assert not res.missing_libs
    searched = {p.name for p in res.searched}  # real paths: libstdc++.so.6.0.30
    assert "libhelper.so" in searched
    assert any(name.startswith("libstdc++.so.6") for name in searched)
    assert any(name.startswith("libc.so") for name in searched)


def test_missing_dt_needed_library_is_reported(libs):
    with LibrarySet([]) as search:  # the helper's dir is not searched
        result = check_symbols(libs["ext"], search, python=vb.this_python())
    assert result.status == "fail"
    assert "library libhelper.so (needed by unresolved.so) not found" in result.detail
    assert "helper::add(int, int)" in result.detail  # now unresolved too


def test_runpath_with_origin_is_followed(tmp_path, libs):
    (tmp_path / "lib").mkdir()
    vb.gxx_shared(["helper.cpp"], tmp_path / "lib" / "libhelper.so")
    ext = vb.gxx_shared(["unresolved.cpp"], tmp_path / "ext.so", f"-L{tmp_path / 'lib'}", "-lhelper",
                        "-Wl,-rpath,$ORIGIN/lib")
    with LibrarySet([]) as search:
        res = resolve(ext, search)
    assert not res.missing_libs
    assert len(res.unresolved) == 1


def test_python_symbols_resolve_through_the_interpreter(tmp_path):
    ext = vb.c_extension(tmp_path, vb.this_python())
    with LibrarySet([]) as search:  # Py* symbols: exported by the interpreter or its libpython
        res = resolve(ext, search, python=vb.this_python())
    assert not res.unresolved, res.unresolved


def test_python_symbols_unresolved_without_the_interpreter(tmp_path):
    ext = vb.c_extension(tmp_path, vb.this_python())
    with LibrarySet([]) as search:
        res = resolve(ext, search, python=None)
    assert "PyModule_Create2" in res.unresolved


def test_cpu_only_library_uses_no_cuda_runtime(libs):
    assert check_cudart(libs["ext"], "13.0").detail == "does not use the CUDA runtime"


@pytest.mark.skipif(not vb.have("nvcc"), reason="needs nvcc")
def test_cudart_shared_against_torch_cuda(tmp_path):
    so = vb.nvcc_shared(["kernel.cu"], tmp_path / "k.so", "-cudart", "shared",
                        "-gencode", "arch=compute_90,code=sm_90")
    same = check_cudart(so, "13.0")
    other = check_cudart(so, "12.8")
    assert same.status == "pass" and "libcudart.so.13" in same.detail
    assert other.status == "fail"
    assert other.summary == ("links libcudart.so.13 but runs with torch's CUDA 12.8: two CUDA "
                             "runtimes in one process")
    static = vb.nvcc_shared(["kernel.cu"], tmp_path / "s.so", "-gencode", "arch=compute_90,code=sm_90")
    assert "linked statically" in check_cudart(static, "12.8").detail
