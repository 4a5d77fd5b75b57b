"""A stack variable decided by evidence (stacks/pointcept.toml's POINTCEPT_SPCONV_ALGO): setup
writes spconv's own (implicit-GEMM) choice only where the installed spconv wheel's newest
manifest line records a passing stress, Native otherwise (skipped, failed, or never stressed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuforge.config.stacks import load_stack
from cuforge.core.project import find_project
from cuforge.publish.wheelhouse import Entry, Status, Wheelhouse
from cuforge.verify.report import CheckResult
from cuforge.workstation.decision import Setup
from cuforge.workstation.setup import settled

ROOT = Path(__file__).resolve().parents[2]


def _setup(house: Wheelhouse) -> Setup:
    stack = load_stack(find_project(root=ROOT), "pointcept")
    return Setup(stack, None, (), (), (), house, frozenset(), None)


def _algo(p: Setup) -> str:
    return next(v for v in settled(p).env if v.name == "POINTCEPT_SPCONV_ALGO").value


@pytest.mark.parametrize("stress, algo", [(None, "native"),
                                          (CheckResult("stress", "skipped", "skipped: no GPU"), "native"),
                                          (CheckResult("stress", "fail", "3 wrong results"), "native"),
                                          (CheckResult("stress", "pass", "passed: 37000 calls"), "default")])
def test_spconvs_algorithm_follows_its_stress(tmp_path, stress, algo):
    house = Wheelhouse(tmp_path / "wh")
    checks = {"import": CheckResult("import", "pass", "ok")}
    if stress is not None:
        checks["stress"] = stress
    house.publish(None, Entry("spconv", Status.COMPILED, wheel="spconv.whl", checks=checks))
    assert _algo(_setup(house)) == algo


def test_the_newest_line_decides(tmp_path):
    house = Wheelhouse(tmp_path / "wh")
    house.publish(None, Entry("spconv", Status.COMPILED, wheel="a.whl",
                              checks={"stress": CheckResult("stress", "pass", "passed")}))
    house.publish(None, Entry("spconv", Status.COMPILED, wheel="b.whl", checks={}))   # rebuilt
    assert _algo(_setup(house)) == "native"
