"""Which kernel set ``cuforge setup`` builds (cuforge.workstation.decision.kernel_set): the
Pointcept stack's 3d set for a wheelhouse without spconv, never a rebuild only to change the set
of a wheel it holds, the recipes' sets with a team's wheels, and --kernels over everything."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from cuforge.config.combos import select_combo
from cuforge.config.stacks import load_stack
from cuforge.core.project import find_project
from cuforge.publish.wheelhouse import Entry, Status, Wheelhouse
from cuforge.workstation.decision import SetupRequest, kernel_set

ROOT = Path(__file__).resolve().parents[2]


def _house(tmp_path: Path, spconv_kernels: str | None) -> Wheelhouse:
    """A wheelhouse holding a real (tiny) spconv wheel built with ``spconv_kernels``, or none."""
    house = Wheelhouse(tmp_path / "wh")
    if spconv_kernels is not None:
        wheel = tmp_path / "spconv_cu130-2.3.8+cu130-cp312-cp312-linux_x86_64.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr("spconv/__init__.py", "")
        house.publish(wheel, Entry("spconv", Status.COMPILED, kernels=spconv_kernels))
    return house


def _decide(tmp_path: Path, house: Wheelhouse, **req) -> tuple[str | None, str]:
    project = find_project(ROOT)
    request = SetupRequest("pointcept", tmp_path, tmp_path / ".venv",
                           select_combo(project, name="3.12-cu130"), **req)
    return kernel_set(request, load_stack(project, "pointcept"), house, house.latest())


def test_a_wheelhouse_without_spconv_gets_the_stacks_3d_set(tmp_path: Path) -> None:
    kernels, why = _decide(tmp_path, _house(tmp_path, None))
    assert kernels == "3d" and "the pointcept stack's" in why and "--kernels lean" in why


@pytest.mark.parametrize("held", ["lean: without gemm Volta; ConvParams in their headers",
                                  "full", "3d: the 3-D sparse ops only; lean: without ..."])
def test_the_set_of_a_held_wheel_is_kept(tmp_path: Path, held: str) -> None:
    kernels, why = _decide(tmp_path, _house(tmp_path, held))
    assert kernels == held.split(":")[0] and "the wheelhouse holds" in why


def test_a_teams_wheels_come_with_the_recipes_sets(tmp_path: Path) -> None:
    assert _decide(tmp_path, _house(tmp_path, None), team_wheels="http://lab:8080/simple/") == (
        None, "")


def test_kernels_on_the_command_line_wins(tmp_path: Path) -> None:
    house = _house(tmp_path, "lean: without gemm Volta")
    assert _decide(tmp_path, house, kernels="full") == ("full", "--kernels")
