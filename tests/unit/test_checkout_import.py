"""smoke/checkout_models/_checkout_import.py on fixture checkouts in upstream's shape
(tests/fixtures/upstream/{pointcept,milo}): the model file and what it imports load for real;
the package __init__s that would pull training code (here: a package that does not exist)
never run. Each case runs in a fresh interpreter, as the model stage does."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HELPER_DIR = REPO / "smoke" / "checkout_models"
UPSTREAM = REPO / "tests" / "fixtures" / "upstream"


def run(code: str) -> dict:
    prog = f"import sys, json\nsys.path.append({str(HELPER_DIR)!r})\nimport _checkout_import\n"
    out = subprocess.run([sys.executable, "-c", prog + textwrap.dedent(code)],
                         capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_ptv3_file_imports_without_the_package_inits():
    got = run(f"""
        import importlib
        root = {str(UPSTREAM / "pointcept")!r}
        _checkout_import.install(root, ["pointcept"])
        m = importlib.import_module(
            "pointcept.models.point_transformer_v3.point_transformer_v3m1_base")
        from pointcept.models.builder import build_model
        model = build_model(dict(type="PT-v3m1", enable_flash=False))
        print(json.dumps({{
            "file": m.__file__, "cls": type(model).__name__,
            "forward": model.forward({{"offset": [3, 5]}}),
            "norm": model.norm.__module__, "hook": model.hook_base.__module__,
            "loaded": sorted(n for n in sys.modules if n.startswith("pointcept")),
            "not_run": _checkout_import.not_run_inits(root, ["pointcept"])}}))
        """)
    assert got["file"].endswith("point_transformer_v3/point_transformer_v3m1_base.py")
    assert got["cls"] == "PointTransformerV3" and got["forward"] is True
    # names re-exported only by an __init__ were found where they are defined
    assert got["norm"] == "pointcept.models.point_prompt_training.prompt_driven_normalization"
    assert got["hook"] == "pointcept.engines.hooks.default"
    # nothing that needs the training-only package was imported
    for never in ("pointcept.models.heavy_model", "pointcept.engines.hooks.misc",
                  "pointcept.models.utils.checkpoint",
                  "pointcept.models.point_transformer_v3.point_transformer_v3m2_sonata"):
        assert never not in got["loaded"]
    assert "pointcept/models/__init__.py" in got["not_run"]


def test_a_missing_name_says_where_it_looked():
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        sys.path.append({str(HELPER_DIR)!r})
        import _checkout_import
        _checkout_import.install({str(UPSTREAM / "pointcept")!r}, ["pointcept"])
        from pointcept.models.utils import no_such_helper
        """)], capture_output=True, text=True, cwd="/")
    assert out.returncode == 1
    assert "no module in it defines one" in out.stderr or "cannot import name" in out.stderr


def test_milo_renderer_runs_its_own_init_but_not_the_scene_loader():
    got = run(f"""
        root = {str(UPSTREAM / "milo" / "milo")!r}
        _checkout_import.install(root, ["scene", "utils", "gaussian_renderer"],
                                 run_init=["gaussian_renderer"])
        from gaussian_renderer import render_imp
        from gaussian_renderer.gof import render_gof
        from gaussian_renderer.radegs import render_radegs
        from scene.gaussian_model import GaussianModel
        pc = GaussianModel(3)
        print(json.dumps({{
            "renders": [f(None, pc, None, None)["render"][0]
                        for f in (render_radegs, render_gof, render_imp)],
            "loaded": sorted(sys.modules)}}))
        """)
    assert got["renders"] == ["diff_gaussian_rasterization", "diff_gaussian_rasterization_gof",
                              "diff_gaussian_rasterization_ms"]
    assert "scene.dataset_readers" not in got["loaded"]
