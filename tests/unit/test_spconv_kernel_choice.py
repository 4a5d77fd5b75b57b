"""spconv's lean kernel set keeps every kernel its tuner can choose (issue 51, point 2).

The fixture tree (tests/fixtures/upstream/spconv) holds upstream's 728 parameter sets, counted
by the attributes the tuner reads (spconv/kernels.csv). Its setup.py is patched with
patches/spconv and run for real twice per combo: without the recipe's kernel filter (the full
build) and with the variable the plan sets for the combo's arches (the lean build). Then
spconv's own selection rules, restated below from the C++ tuner at 263d6b4, are evaluated for
every arch the combo targets (and a newer GPU for a +PTX target), with tf32 on and off: a set
the tuner may choose in the full build must be in the lean one.
"""

from __future__ import annotations

import runpy
import shutil
import sys
from pathlib import Path

import pytest

from cuforge.config.arches import ArchList, parse_arch_list
from cuforge.config.combos import load_combos
from cuforge.config.kernels import KernelFilter, KernelRule, KernelSet
from cuforge.config.recipes import parse_recipe
from cuforge.core.project import find_project
from cuforge.patching import apply, load_patch_set

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests/fixtures/upstream/spconv"
SHIM = REPO / "src/cuforge/pipeline/builders/shim"
RECIPE = parse_recipe(REPO / "recipes/spconv.toml")
# cumm/gemm/algospec/core.py:30-36 (cumm 0.8.2): the lowest arch of each algorithm
MIN_ARCH = {"Simt": (3, 5), "Volta": (7, 0), "Turing": (7, 5), "Ampere": (8, 0)}
# the arch lists, beside every combo's own
LISTS = ["9.0", "12.0", "12.1+PTX;12.0"]


def tuner_may_choose(p, arch: tuple[int, int], use_tf32: bool) -> bool:
    """spconv/csrc/sparse/convops.py (GemmTunerSimple / ConvTunerSimple.get_all_available):
    the checks that depend on the kernel, the GPU and tf32. The rest (leading dimensions, mask
    width, NVRTC or PTX fallbacks) depend on the call's shapes or the build and are taken as
    passing: this errs towards calling more kernels selectable."""
    if arch < MIN_ARCH[p.algo.value]:                                     # :560, :1049
        return False
    if arch >= (7, 5) and p.algo.value == "Volta":                         # :563, :1052
        return False
    dtypes = [d.shortcut() for d in ((p.dtype_a, p.dtype_b, p.dtype_c) if p.family == "gemm"
                                     else (p.dtype_input, p.dtype_weight, p.dtype_output))]
    f32 = dtypes[:2] == ["f32"] * 2 if p.family == "gemm" else dtypes == ["f32"] * 3
    if not use_tf32 and p.tensorop and f32:                                # :566, :1055
        return False
    is_fp16 = dtypes == ["f16"] * 3                                        # :1019-1020
    if p.family == "conv" and arch >= (7, 0) and is_fp16 and p.algo.value == "Simt":   # :1061
        return False
    return True


def devices(arches: ArchList) -> list[tuple[int, int]]:
    """The GPUs a build for ``arches`` runs on: each target, and a newer one for +PTX."""
    found = {(t.arch.major, t.arch.minor) for t in arches}
    found |= {(t.arch.major, t.arch.minor + 1) for t in arches if t.ptx}
    return sorted(found)


def kernel_sets(tmp_path: Path, monkeypatch, env: dict[str, str]) -> tuple[list, list]:
    """(GEMM sets, implicit-GEMM sets) the patched fixture setup.py builds under ``env``."""
    tree = tmp_path / f"spconv{len(list(tmp_path.iterdir()))}"
    shutil.copytree(FIXTURE, tree)
    apply(load_patch_set("spconv", REPO / "patches"), tree)
    monkeypatch.setenv("SPCONV_DISABLE_JIT", "1")
    monkeypatch.delenv("CUFORGE_KERNEL_DROP", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.syspath_prepend(str(SHIM))
    monkeypatch.syspath_prepend(str(tree))
    for name in [m for m in sys.modules if m == "spconv" or m.startswith("spconv.")]:
        monkeypatch.delitem(sys.modules, name)
    ns = runpy.run_path(str(tree / "setup.py"), run_name="spconv_setup")
    return ns["all_shuffle"], ns["all_imp"]


def missing(full: list, lean: list, arches: ArchList) -> set[str]:
    """Sets the tuner may choose on a GPU of ``arches`` in the full build but not the lean."""
    kept = {p.name for p in lean}
    return {p.name for p in full for arch in devices(arches) for tf32 in (True, False)
            if tuner_may_choose(p, arch, tf32) and p.name not in kept}


def arch_lists() -> list[str]:
    combos = [str(c.arches) for c in load_combos(find_project(REPO))]
    return sorted(set(combos + LISTS))


@pytest.mark.parametrize("arches", arch_lists())
def test_lean_set_keeps_every_kernel_the_tuner_can_choose(tmp_path: Path, monkeypatch,
                                                          arches: str) -> None:
    targets = parse_arch_list(arches)
    full = [p for fam in kernel_sets(tmp_path, monkeypatch, {}) for p in fam]
    lean = [p for fam in kernel_sets(tmp_path, monkeypatch, RECIPE.kernels.env(targets))
            for p in fam]
    assert len(full) == 728 and sum(not p.is_nvrtc for p in full) == 278
    assert missing(full, lean, targets) == set()
    if min(devices(targets)) >= (7, 5):   # every combo here: the three rules hold
        assert sum(not p.is_nvrtc for p in lean) == 278 - 59
        assert {p.name for p in lean} == {p.name for p in full
                                          if any(tuner_may_choose(p, a, True)
                                                 for a in devices(targets))}


def test_full_kernels_builds_every_set(tmp_path: Path, monkeypatch) -> None:
    targets = parse_arch_list("12.0")
    gemm, conv = kernel_sets(tmp_path, monkeypatch, RECIPE.kernels.env(targets, KernelSet.FULL))
    assert (len(gemm), len(conv)) == (84, 644)


def test_a_rule_that_drops_a_choosable_kernel_is_caught(tmp_path: Path, monkeypatch) -> None:
    """The check can fail: tf32 kernels (Ampere f32) are the tuner's when tf32 is on."""
    targets = parse_arch_list("12.0")
    bad = KernelFilter(KernelSet.LEAN, (KernelRule("conv", "Ampere", ("f32", "f32", "f32"),
                                                   "8.0", "nowhere"),))
    full = [p for fam in kernel_sets(tmp_path, monkeypatch, {}) for p in fam]
    lean = [p for fam in kernel_sets(tmp_path, monkeypatch, bad.env(targets)) for p in fam]
    lost = missing(full, lean, targets)
    assert len(lost) == 34 and all("Ampere-f32/f32/f32" in name for name in lost)


def test_rules_hold_only_on_every_target() -> None:
    # a Volta GPU in the list keeps the Volta kernels; SIMT fp16 stays out from 7.0 on
    kept = {r.describe() for r in RECIPE.kernels.applicable(parse_arch_list("7.0;9.0"))}
    assert kept == {"conv Simt f16,f16,f16"}
    assert RECIPE.kernels.applicable(parse_arch_list("6.1;9.0")) == ()
