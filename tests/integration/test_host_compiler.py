"""The host compiler probe, with real compilers: Debian's g++ links libstdc++.so dynamically;
a wrapper that forces -static-libstdc++ (like the H200's CXX) is detected, then replaced by a
fallback or refused with the combo key that fixes it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cuforge.env import hostcxx
from cuforge.core.errors import ToolchainError
from cuforge.env.toolchain import Toolkit, build_environment
from cuforge.config.arches import parse_arch_list

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture
def static_gxx(tmp_path) -> str:
    """A g++ that links libstdc++ into every shared object (and binds symbols locally)."""
    wrapper = tmp_path / "wrap" / "g++"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} -static-libstdc++ '
                       '-Wl,-Bsymbolic "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_distribution_gxx_links_libstdcxx_dynamically():
    compiler = hostcxx.probe("g++")
    assert any(n.startswith("libstdc++.so.") for n in compiler.needed)
    assert compiler.std_defined == 0 and not compiler.static_libstdcxx


def test_static_wrapper_is_detected(static_gxx):
    compiler = hostcxx.probe(static_gxx)
    assert compiler.static_libstdcxx
    assert compiler.std_defined > 1000          # the probe's stream drags in the library's std::
    assert not any(n.startswith("libstdc++") for n in compiler.needed)
    assert "links libstdc++ statically" in compiler.describe()


def test_static_default_is_replaced_by_a_fallback(static_gxx, monkeypatch):
    monkeypatch.setenv("CXX", static_gxx)
    monkeypatch.delenv("CC", raising=False)
    gxx = shutil.which("g++")
    compiler, note = hostcxx.choose(fallbacks=("/nonexistent/g++", gxx))
    assert compiler.cxx == gxx and not compiler.static_libstdcxx
    assert static_gxx in note and f"building with {gxx} instead" in note
    env = build_environment(Toolkit(Path("/nonexistent"), None, compiler), parse_arch_list("12.0"),
                            jobs=1, cxx11_abi=True, extra_include=[], extra_lib=[], bin_dirs=[])
    assert env["CXX"] == env["CUDAHOSTCXX"] == env["NVCC_CCBIN"] == gxx
    assert env["CC"] == str(Path(gxx).with_name("gcc"))
    assert "-ccbin" not in env["NVCC_APPEND_FLAGS"]   # ccache does not hash that variable


def test_static_default_without_fallback_is_refused(static_gxx, monkeypatch):
    monkeypatch.setenv("CXX", static_gxx)
    with pytest.raises(ToolchainError) as err:
        hostcxx.choose(fallbacks=())
    assert err.value.exit_code == 3
    assert 'host_cxx = "/usr/bin/g++"' in str(err.value) and "envs/combos.toml" in str(err.value)


def test_combo_host_cxx_must_link_dynamically(static_gxx):
    with pytest.raises(ToolchainError, match="the combo's host_cxx"):
        hostcxx.choose(static_gxx, fallbacks=(shutil.which("g++"),))
    compiler, note = hostcxx.choose(shutil.which("g++"))
    assert not compiler.static_libstdcxx and note == ""
