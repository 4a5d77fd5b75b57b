"""Dual-ABI classification of mangled names (no compiler, no c++filt needed)."""

from __future__ import annotations

import pytest

from cuforge.verify.abi import abi_of
from cuforge.core.elf import demangle

CXX11 = "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"


@pytest.mark.parametrize("mangled, expected", [
    ("_ZN3c106detail14torchCheckFailEPKcS2_jRKSs", "old"),  # the brief's import error
    (f"_ZN3c106detail14torchCheckFailEPKcS2_jRK{CXX11}", "new"),
    ("_ZNKSs4sizeEv", "old"),  # std::string::size() const (NSs)
    ("_ZNSsC1EPKcRKSaIcE", "old"),  # constructor: C1 is not a source name
    ("_ZNSs12_M_constructEmc", "old"),
    ("_Z3fooSt12basic_stringIwSt11char_traitsIwESaIwEE", "old"),  # spelled out, no __cxx11
    ("_Z3fooSbIwSt11char_traitsIwESaIwEE", "old"),
    ("_ZNSt4listIiSaIiEE5clearEv", "old"),
    ("_ZNSt7__cxx114listIiSaIiEE5clearEv", "new"),
    ("_Z3fooB5cxx11v", "new"),  # [abi:cxx11] tag
    ("_Z3bazILi42EEvRKSs", "old"),  # literal template argument
    ("_Z5Ssizei", None),  # "Ss" inside an identifier
    ("_ZN12_GLOBAL__N_13SsaEv", None),
    ("_ZNSt6vectorIiSaIiEE9push_backERKi", None),
    ("_ZTISt13runtime_error", None),
    ("greet_length", None),  # C symbol
])
def test_abi_of(mangled, expected):
    assert abi_of(mangled) == expected


def test_demangle_falls_back_to_the_mangled_name(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert demangle(["_Z3fooi"]) == {"_Z3fooi": "_Z3fooi"}
