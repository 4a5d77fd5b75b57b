"""GPU smoke test of cuforge's chunked nvdiff_rasterization (milo patch set).

Rasterizes a surface-like mesh (a displaced grid, millions of triangles) with the patched
function from milo/scene/mesh.py, once in one call and then in chunks (MILO_RAST_TRI_CHUNK), and
checks that
  * every pixel gets the same triangle id, except where two triangles tie in depth, and
  * the device memory nvdiffrast holds (torch.cuda.mem_get_info, fresh context per run) falls.

Usage: python smoke/milo_chunked_rasterization.py [--mesh PATCHED_MESH_PY] [--grid N] [--res R]
Without --mesh, the milo patch set is applied to the test fixture in a temporary directory.
Exit codes: 0 passed, 1 failed, 77 skipped (no GPU, or nvdiffrast missing).
"""

from __future__ import annotations

import argparse
import ast
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP = 77
CUFORGE_FUNCTIONS = {
    "_cuforge_tri_chunk_size",
    "_cuforge_merge_nearest",
    "_cuforge_rasterize_chunked",
    "nvdiff_rasterization",
}


def skip(reason: str) -> None:
    print(f"skipped: {reason}")
    sys.exit(SKIP)


def patched_mesh_py(workdir: Path) -> Path:
    """Apply the milo patch set to the fixture checkout and return its mesh.py."""
    sys.path.insert(0, str(REPO / "src"))
    from cuforge.patching import apply, load_patch_set

    root = workdir / "milo"
    shutil.copytree(REPO / "tests/fixtures/upstream/milo", root)
    apply(load_patch_set("milo", REPO / "patches"), root)
    return root / "milo/scene/mesh.py"


def load_functions(mesh_py: Path, torch, dr) -> dict:
    """Exec only cuforge's functions from mesh.py (the module itself imports MILo's packages)."""
    source = mesh_py.read_text()
    nodes = [n for n in ast.parse(source).body if getattr(n, "name", None) in CUFORGE_FUNCTIONS]
    if {n.name for n in nodes} != CUFORGE_FUNCTIONS:
        raise SystemExit(f"{mesh_py} is not patched by cuforge (run: cuforge patch milo ...)")
    namespace = {"torch": torch, "dr": dr}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(mesh_py), "exec"), namespace)
    return namespace


def displaced_grid(torch, n: int):
    """An n x n grid over [-1, 1]^2 with a smooth height field: 2 (n-1)^2 triangles."""
    lin = torch.linspace(-1.0, 1.0, n, device="cuda")
    y, x = torch.meshgrid(lin, lin, indexing="ij")
    z = 0.08 * torch.sin(6 * x) * torch.cos(5 * y)
    verts = torch.stack([x, y, z], dim=-1).reshape(-1, 3)
    idx = torch.arange(n * n, device="cuda", dtype=torch.int32).reshape(n, n)
    a, b, c, d = idx[:-1, :-1], idx[:-1, 1:], idx[1:, :-1], idx[1:, 1:]
    faces = torch.cat([torch.stack([a, b, d], -1), torch.stack([a, d, c], -1)]).reshape(-1, 3)
    return verts, faces.contiguous()


class Camera:
    """Looks down -z at the grid from z = 2.4; full_proj_transform in MILo's row-vector form."""

    def __init__(self, torch) -> None:
        near, far, fov = 0.1, 10.0, math.radians(50)
        f = 1 / math.tan(fov / 2)
        proj = torch.tensor(
            [[f, 0, 0, 0], [0, f, 0, 0],
             [0, 0, (far + near) / (near - far), 2 * far * near / (near - far)],
             [0, 0, -1, 0]],
            device="cuda",
        )
        view = torch.eye(4, device="cuda")
        view[2, 3] = -2.4
        self.full_proj_transform = (proj @ view).T.contiguous()


def rasterize(ns, torch, dr, camera, verts, faces, res: int, chunk: int):
    """One run with a fresh CUDA context; returns (rast_out, MiB held after the run)."""
    os.environ["MILO_RAST_TRI_CHUNK"] = str(chunk)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free_before, _ = torch.cuda.mem_get_info()
    glctx = dr.RasterizeCudaContext()
    _, _, _, rast = ns["nvdiff_rasterization"](
        camera, res, res, verts, faces, glctx=glctx, return_rast_out=True
    )
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info()
    held = (free_before - free_after) / 2**20
    result = rast.detach().cpu()
    del rast, glctx
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return result, held


def compare(single, chunked) -> tuple[int, int]:
    """(pixels whose ids differ without a depth tie, pixels whose ids differ at a tie)."""
    differ = single[..., 3] != chunked[..., 3]
    tie = (single[..., 2] - chunked[..., 2]).abs() <= 1e-6
    return int((differ & ~tie).sum()), int((differ & tie).sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh", type=Path, help="a mesh.py patched by `cuforge patch milo`")
    parser.add_argument("--grid", type=int, default=2001, help="grid side (2001: 8 M triangles)")
    parser.add_argument("--res", type=int, default=1024, help="image width and height")
    args = parser.parse_args()

    try:
        import torch
    except ImportError:
        skip("no GPU (torch is not installed)")
    if not torch.cuda.is_available():
        skip("no GPU")
    try:
        import nvdiffrast.torch as dr
    except ImportError as err:
        skip(f"nvdiffrast is not importable ({err})")

    with tempfile.TemporaryDirectory() as tmp:
        mesh_py = args.mesh or patched_mesh_py(Path(tmp))
        ns = load_functions(mesh_py, torch, dr)
        verts, faces = displaced_grid(torch, args.grid)
        camera = Camera(torch)
        n_faces = faces.shape[0]
        single, single_mib = rasterize(ns, torch, dr, camera, verts, faces, args.res, 0)
        print(f"{n_faces} triangles, {args.res}^2 pixels, {int((single[..., 3] > 0).sum())} covered")
        print(f"  single call: {single_mib:8.1f} MiB held by nvdiffrast")
        failed = False
        for parts in (4, 16):
            chunk = math.ceil(n_faces / parts)
            chunked, mib = rasterize(ns, torch, dr, camera, verts, faces, args.res, chunk)
            wrong, ties = compare(single, chunked)
            ok = wrong == 0 and mib < single_mib
            failed |= not ok
            print(
                f"  {parts:2d} chunks:   {mib:8.1f} MiB; ids differ at {wrong} pixels "
                f"(+{ties} depth ties) -> {'ok' if ok else 'FAILED'}"
            )
    print("FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
