"""`cuforge verify` on a wheelhouse where one wheel imports another at import time (spconv
imports cumm, whose wheel is named cumm-cu130): the dependent's import check gets the
dependency's wheel beside it, found through the recipes and the CUDA-suffixed wheel name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.config.arches import parse_arch_list  # noqa: E402
from cuforge.config.recipes import parse_recipe  # noqa: E402
from cuforge.env.torchinfo import probe_interpreter  # noqa: E402
from cuforge.verify import context_from, verify_wheel  # noqa: E402
from cuforge.pipeline.upstream_stage import dependency_roots, recipe_for  # noqa: E402

pytestmark = pytest.mark.skipif(vb.torch_python() is None, reason=vb.NO_TORCH)


@pytest.fixture()
def stack(tmp_path: Path):
    recipes_dir = tmp_path / "recipes"
    recipes_dir.mkdir()
    (recipes_dir / "corelib.toml").write_text(
        'kind = "prebuilt"\nmodules = ["corelib"]\n[prebuilt]\nrequirements = ["corelib==0.1"]\n'
        'sha256 = ["0000000000000000000000000000000000000000000000000000000000000000"]\n')
    (recipes_dir / "toplib.toml").write_text(
        'kind = "prebuilt"\ndepends = ["corelib"]\nmodules = ["toplib"]\n'
        '[prebuilt]\nrequirements = ["toplib==0.1"]\n'
        'sha256 = ["0000000000000000000000000000000000000000000000000000000000000000"]\n')
    recipes = {p.stem: parse_recipe(p) for p in recipes_dir.glob("*.toml")}
    house = tmp_path / "house"
    house.mkdir()
    core = vb.make_wheel(house, "corelib_cu130", {"corelib/__init__.py": "VALUE = 42\n"})
    top = vb.make_wheel(house, "toplib", {"toplib/__init__.py": "from corelib import VALUE\n"})
    return recipes, {"corelib-cu130": core, "toplib": top}, top


def test_cuda_suffixed_wheel_finds_its_recipe(stack):
    recipes, _, _ = stack
    assert recipe_for("corelib-cu130", recipes).name == "corelib"
    assert recipe_for("toplib", recipes).name == "toplib"
    assert recipe_for("unrelated", recipes) is None


def test_dependent_imports_only_with_its_dependency(stack, tmp_path):
    recipes, by_package, top = stack
    ctx = context_from(probe_interpreter(vb.torch_python()), parse_arch_list("9.0"))
    alone = verify_wheel(top, ctx, modules=["toplib"], timeout=120)
    assert {r.check: r.status for r in alone.results}["import"] == "fail"
    roots = dependency_roots(recipes["toplib"], recipes, by_package, tmp_path / "deps")
    assert roots and (roots[0] / "corelib" / "__init__.py").is_file()
    together = verify_wheel(top, ctx, modules=["toplib"], timeout=120, dependency_paths=roots)
    assert {r.check: r.status for r in together.results}["import"] == "pass"
