"""The rasterizer smoke scripts expect what the rasterizers return.

The _gof smoke once looked for a 3-channel image; the real forward returns a 9-channel image and
radii (seen on the H200). Each smoke script now declares forward's outputs (``OUTPUTS``), and
the fixture package, shaped like the code at MILo's pin (see docs/packages.md for what was
checked against the real tree), is read here without torch: the declared outputs must be what
its forward returns, every settings field and forward argument must be one the shared helper
fills, and ``integrate`` must be there."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "smoke"
GOF = (ROOT / "tests/fixtures/upstream/milo/submodules/diff-gaussian-rasterization_gof"
       / "diff_gaussian_rasterization_gof/__init__.py")


def _assigned(path: Path, name: str):
    """The literal value assigned to ``name`` at the top level of ``path``."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} assigns no {name}")


def _classes(path: Path) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)}


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _helper_names() -> tuple[set[str], set[str]]:
    """(settings the helper knows, forward arguments it can pass): its two dict literals."""
    keys: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse((SMOKE / "_gaussian_rasterizer.py").read_text())):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            keys[node.targets[0].id] = {ast.literal_eval(k) for k in node.value.keys}
    return keys["known"], keys["args"]


def test_gof_smoke_declares_what_forward_returns():
    outputs = _assigned(SMOKE / "check_diff-gaussian-rasterization_gof.py", "OUTPUTS")
    autograd = _classes(GOF)["_RasterizeGaussians"]
    returned = [r for r in ast.walk(_method(autograd, "forward")) if isinstance(r, ast.Return)]
    names = [e.id for e in returned[-1].value.elts]
    assert [name for name, _ in outputs] == names == ["color", "radii"]
    assert dict(outputs)["color"] == (9, "H", "W") and dict(outputs)["radii"] == ("P",)


def test_gof_integrate_and_inputs_are_what_the_smoke_passes():
    known, args = _helper_names()
    classes = _classes(GOF)
    fields = [n.target.id for n in classes["GaussianRasterizationSettings"].body
              if isinstance(n, ast.AnnAssign)]
    assert set(fields) <= known, set(fields) - known
    rasterizer = classes["GaussianRasterizer"]
    forward = _method(rasterizer, "forward").args
    required = [a.arg for a in forward.args[1:len(forward.args) - len(forward.defaults)]]
    assert set(required) <= args and {a.arg for a in forward.args[1:]} <= args
    integrate = [a.arg for a in _method(rasterizer, "integrate").args.args]
    assert integrate[:2] == ["self", "points3D"] and set(integrate[2:]) <= args


def test_every_rasterizer_smoke_declares_its_outputs():
    for name in ("diff-gaussian-rasterization", "diff-gaussian-rasterization_ms",
                 "diff-gaussian-rasterization_gof"):
        outputs = dict(_assigned(SMOKE / f"check_{name}.py", "OUTPUTS"))
        assert outputs["color"][1:] == ("H", "W") and outputs["radii"] == ("P",), name
