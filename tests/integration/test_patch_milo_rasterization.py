"""The code the milo and pointcept sets add, exercised for real (torch on CPU; stub spconv).

The pixel merge of the chunked rasterizer is a pure function (_cuforge_merge_nearest) tested
with real tensors. The chunking loop is also run against a small z-buffer stand-in for
dr.rasterize to check the range-mode call contract; the GPU check with real nvdiffrast is
smoke/milo_chunked_rasterization.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fixture_sets import fixture_set

from cuforge.patching import apply, load_patch_set

REPO = Path(__file__).resolve().parents[2]
PATCHES = REPO / "patches"
UPSTREAM = REPO / "tests" / "fixtures" / "upstream"


def torch_python() -> str:
    """An interpreter with torch: CUFORGE_TEST_TORCH_PYTHON, else /tmp/tenv/bin/python."""
    candidates = [os.environ.get("CUFORGE_TEST_TORCH_PYTHON"), "/tmp/tenv/bin/python"]
    for python in filter(None, candidates):
        if Path(python).exists():
            probe = subprocess.run([python, "-c", "import torch"], capture_output=True)
            if probe.returncode == 0:
                return python
    pytest.skip("no Python with torch (set CUFORGE_TEST_TORCH_PYTHON)")


@pytest.fixture
def patched_mesh(tmp_path: Path) -> Path:
    root = tmp_path / "milo"
    shutil.copytree(UPSTREAM / "milo", root)
    apply(fixture_set("milo", root), root)
    return root / "milo/scene/mesh.py"


LOADER = """
import ast, sys, torch

def load(mesh_path, dr):
    '''Exec cuforge's functions from the patched mesh.py (not from the payload file).'''
    source = open(mesh_path).read()
    wanted = {"_cuforge_tri_chunk_size", "_cuforge_merge_nearest",
              "_cuforge_rasterize_chunked", "nvdiff_rasterization"}
    nodes = [n for n in ast.parse(source).body if getattr(n, "name", None) in wanted]
    assert len(nodes) == 4, [n.name for n in nodes]
    namespace = {"torch": torch, "dr": dr}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), mesh_path, "exec"), namespace)
    return namespace
"""


def run_torch(script: str, *args: str) -> str:
    python = torch_python()
    done = subprocess.run(
        [python, "-c", LOADER + textwrap.dedent(script), *args],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_merge_nearest_keeps_nearest_hit(patched_mesh: Path) -> None:
    out = run_torch(
        """
        ns = load(sys.argv[1], dr=None)
        merge = ns["_cuforge_merge_nearest"]
        # pixels: a only | b only | both, b nearer | both, a nearer | tie | neither
        a = torch.tensor([[[0.1, 0.2, 0.5, 3.0], [0, 0, 0, 0], [0.1, 0.1, 0.5, 4.0],
                           [0.3, 0.3, 0.2, 5.0], [0.4, 0.4, 0.6, 6.0], [0, 0, 0, 0]]])
        b = torch.tensor([[[0, 0, 0, 0], [0.7, 0.1, 0.4, 9.0], [0.2, 0.2, 0.3, 10.0],
                           [0.5, 0.5, 0.9, 11.0], [0.9, 0.9, 0.6, 12.0], [0, 0, 0, 0]]])
        a.requires_grad_(True); b.requires_grad_(True)
        merged = merge(a, b)
        assert merged[..., 3].tolist() == [[3.0, 9.0, 10.0, 5.0, 6.0, 0.0]], merged
        assert torch.equal(merged[0, 2], b[0, 2].detach()) and torch.equal(merged[0, 3], a[0, 3].detach())
        merged[..., :2].sum().backward()  # gradients reach whichever input was kept
        assert a.grad[0, :, 0].tolist() == [1, 0, 0, 1, 1, 1]
        assert b.grad[0, :, 0].tolist() == [0, 1, 1, 0, 0, 0]
        print("merge ok")
        """,
        str(patched_mesh),
    )
    assert "merge ok" in out


ZBUFFER_FAKE = """
class ZBufferRasterizer:
    '''Stand-in for nvdiffrast.torch: triangle t covers the pixels of footprint[t] at depth[t].

    It follows nvdiffrast's conventions: ids are 1-based with 0 = empty; with 2-D pos, ranges
    [[start, count]] select triangles and ids stay global; with 3-D pos ranges are not allowed.
    '''
    def __init__(self, footprint, depth):
        self.footprint, self.depth, self.calls = footprint, depth, []

    def rasterize(self, glctx, pos, tri, resolution, ranges=None, grad_db=True):
        self.calls.append((pos.dim(), None if ranges is None else ranges.clone()))
        if ranges is None:
            assert pos.dim() == 3
            start, count = 0, tri.shape[0]
        else:
            assert pos.dim() == 2 and ranges.dtype == torch.int32 and ranges.device.type == "cpu"
            start, count = ranges[0].tolist()
        H, W = resolution
        out = torch.zeros(1, H, W, 4)
        best = torch.full((H, W), float("inf"))
        for t in range(start, start + count):
            nearer = self.footprint[t] & (self.depth[t] < best)
            best[nearer] = self.depth[t]
            out[0][nearer] = torch.tensor([0.25, 0.5, float(self.depth[t]), float(t + 1)])
        return out, None
"""


def test_chunked_rasterization_matches_single_call(patched_mesh: Path) -> None:
    out = run_torch(
        ZBUFFER_FAKE
        + textwrap.dedent(
            """
        import os
        torch.manual_seed(0)
        F, H, W = 50, 12, 16
        fake = ZBufferRasterizer(torch.rand(F, H, W) < 0.2, torch.rand(F) * 2 - 1)
        ns = load(sys.argv[1], dr=fake)
        class Camera:
            full_proj_transform = torch.eye(4)
        verts, faces = torch.rand(30, 3), torch.randint(0, 30, (F, 3), dtype=torch.int32)
        call = lambda **kw: ns["nvdiff_rasterization"](Camera(), H, W, verts, faces, **kw)

        os.environ.pop("MILO_RAST_TRI_CHUNK", None)
        single = call(return_rast_out=True, return_positions=True)
        assert fake.calls == [(3, None)]  # unset: upstream's one instanced call

        os.environ["MILO_RAST_TRI_CHUNK"] = "7"
        fake.calls.clear()
        chunked = call(return_rast_out=True, return_positions=True)
        assert [c[0] for c in fake.calls] == [2] * 8
        assert [c[1].tolist() for c in fake.calls][:2] == [[[0, 7]], [[7, 7]]]
        assert fake.calls[-1][1].tolist() == [[49, 1]]
        for s, c in zip(single, chunked):
            assert s.shape == c.shape and torch.equal(s, c), (s, c)
        assert chunked[4].shape == (1, 30, 4)  # pos is returned [1, V, 4] as upstream
        assert torch.equal(call(return_indices_only=True), single[2])
        assert len(call()) == 3 and len(call(return_rast_out=True)) == 4

        os.environ["MILO_RAST_TRI_CHUNK"] = "0"
        fake.calls.clear()
        call()
        assert fake.calls == [(3, None)]
        print("chunked ok", int((single[2] >= 0).sum()))
        """
        ),
        str(patched_mesh),
    )
    assert "chunked ok" in out


def test_unchunked_call_keeps_the_fixture_functions_contract(patched_mesh: Path) -> None:
    """Unset MILO_RAST_TRI_CHUNK: the patched function returns what the unpatched one returns.

    The unpatched function is the fixture's own (it keeps upstream's contract: [1, V, 4] pos in
    one instanced dr.rasterize call, ids - 1, the same tuple per flag), for every flag.
    """
    out = run_torch(
        ZBUFFER_FAKE
        + textwrap.dedent(
            """
        import os
        os.environ.pop("MILO_RAST_TRI_CHUNK", None)
        torch.manual_seed(1)
        F, H, W = 20, 8, 10
        fake = ZBufferRasterizer(torch.rand(F, H, W) < 0.3, torch.rand(F))
        patched = load(sys.argv[1], dr=fake)["nvdiff_rasterization"]
        node = next(n for n in ast.parse(open(sys.argv[2]).read()).body if getattr(n, "name", "") == "nvdiff_rasterization")
        unpatched = {"torch": torch, "dr": fake}
        exec(compile(ast.Module(body=[node], type_ignores=[]), sys.argv[2], "exec"), unpatched)
        class Camera:
            full_proj_transform = torch.rand(4, 4)
        verts, faces = torch.rand(12, 3), torch.randint(0, 12, (F, 3), dtype=torch.int32)
        for flags in ({}, {"return_indices_only": True}, {"return_rast_out": True},
                      {"return_positions": True}, {"return_rast_out": True, "return_positions": True}):
            a = unpatched["nvdiff_rasterization"](Camera(), H, W, verts, faces, **flags)
            b = patched(Camera(), H, W, verts, faces, **flags)
            a, b = ((a,), (b,)) if torch.is_tensor(a) else (a, b)
            assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b)), flags
        assert [c[0] for c in fake.calls] == [3] * 10  # instanced pos, one call each
        print("same contract", len(fake.calls))
        """
        ),
        str(patched_mesh),
        str(UPSTREAM / "milo/milo/scene/mesh.py"),
    )
    assert "same contract 10" in out


def test_bad_chunk_value_is_a_clear_error(patched_mesh: Path) -> None:
    out = run_torch(
        """
        import os
        ns = load(sys.argv[1], dr=None)
        os.environ["MILO_RAST_TRI_CHUNK"] = "lots"
        try:
            ns["_cuforge_tri_chunk_size"]()
        except ValueError as err:
            print("error:", err)
        """,
        str(patched_mesh),
    )
    assert "MILO_RAST_TRI_CHUNK must be a number of triangles" in out


SPCONV_STUB = {
    "spconv/__init__.py": "",
    "spconv/core.py": "import enum\nclass ConvAlgo(enum.Enum):\n    Native = 0\n    MaskImplicitGemm = 1\n",
    "spconv/constants.py": "ALL_WEIGHT_IS_KRSC = {krsc}\n",
    "spconv/pytorch/__init__.py": "",
    "spconv/pytorch/conv.py": "class SparseConvolution:\n    algo = 'MaskImplicitGemm'\n",
    "spconv/pytorch/pool.py": "class SparseMaxPool:\n    algo = 'MaskImplicitGemm'\n",
}

SPCONV_SCRIPT = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("spconv_algo", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
from spconv.pytorch.conv import SparseConvolution
from spconv.pytorch.pool import SparseMaxPool
class Linear: algo = "untouched"
class Model:
    def __init__(self): self.layers = [SparseConvolution(), SparseMaxPool(), Linear()]
    def modules(self): return [self, *self.layers]
model = Model()
try:
    assert module.force_native_algo(model) is model
    print([getattr(m.algo, "name", m.algo) for m in model.layers])
except RuntimeError as err:
    print("refused:", err)
"""


@pytest.mark.parametrize(
    ("env", "krsc", "expected"),
    [
        ("native", True, "['Native', 'Native', 'untouched']"),
        ("", True, "['MaskImplicitGemm', 'MaskImplicitGemm', 'untouched']"),
        ("native", False, "refused: spconv.constants.ALL_WEIGHT_IS_KRSC is False"),
    ],
)
def test_force_native_algo(tmp_path: Path, env: str, krsc: bool, expected: str) -> None:
    root = tmp_path / "pointcept"
    shutil.copytree(UPSTREAM / "pointcept", root)
    apply(load_patch_set("pointcept", PATCHES), root)
    stub = tmp_path / "stub"
    for name, text in SPCONV_STUB.items():
        (stub / name).parent.mkdir(parents=True, exist_ok=True)
        (stub / name).write_text(text.format(krsc=krsc))
    done = subprocess.run(
        [sys.executable, "-c", SPCONV_SCRIPT, str(root / "pointcept/utils/spconv_algo.py")],
        capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(stub), "POINTCEPT_SPCONV_ALGO": env},
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
