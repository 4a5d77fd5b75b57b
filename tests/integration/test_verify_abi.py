"""Check 1 on real compiler output: the same std::string library built with the old and the
new libstdc++ ABI, judged against a new-ABI torch (torch >= 2.7) and an old-ABI one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.verify.abi import abi_offenders, check_abi  # noqa: E402
from cuforge.core.elf import ElfLib  # noqa: E402

pytestmark = pytest.mark.skipif(not vb.have("g++"), reason="needs g++")


@pytest.fixture(scope="module")
def abi_libs(tmp_path_factory) -> dict[int, Path]:
    out = tmp_path_factory.mktemp("abi")
    return {flag: vb.gxx_shared(["abi_lib.cpp"], out / f"libabi{flag}.so",
                                f"-D_GLIBCXX_USE_CXX11_ABI={flag}")
            for flag in (0, 1)}


def test_old_abi_library_fails_against_new_abi_torch(abi_libs):
    result = check_abi(abi_libs[0], torch_cxx11_abi=True)
    assert result.status == "fail"
    assert "built with _GLIBCXX_USE_CXX11_ABI=0 but torch uses =1" in result.summary
    # the exported API is named demangled, in its old-ABI spelling (no __cxx11)
    assert "greet(std::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)" \
        in result.detail or "greet(std::string const&)" in result.detail
    assert "fix: compile with -D_GLIBCXX_USE_CXX11_ABI=1" in result.detail


def test_old_abi_library_lists_undefined_and_defined_offenders(abi_libs):
    with ElfLib(abi_libs[0]) as lib:
        undefined, defined = abi_offenders(lib, torch_cxx11_abi=True)
    assert "_Z5greetRKSs" in defined
    assert any(name.startswith("_ZNSs") or "Ss" in name for name in undefined)  # libstdc++'s old string


def test_new_abi_library_passes_against_new_abi_torch(abi_libs):
    result = check_abi(abi_libs[1], torch_cxx11_abi=True)
    assert result.status == "pass", result.detail


def test_new_abi_library_fails_against_old_abi_torch(abi_libs):
    result = check_abi(abi_libs[1], torch_cxx11_abi=False)
    assert result.status == "fail"
    assert "__cxx11" in result.detail


def test_old_abi_library_passes_against_old_abi_torch(abi_libs):
    assert check_abi(abi_libs[0], torch_cxx11_abi=False).status == "pass"
