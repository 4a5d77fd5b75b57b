"""Smoke for Pointcept's pointseg (C++ only, runs on the CPU): segment a mesh made of two
far-apart, disconnected grids; no segment may span both. The pipeline's smoke gate is
GPU-only, so without a GPU this reports skipped like the others.
Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

from pointseg import segment_mesh  # noqa: E402


def grid(n: int, shift: float) -> tuple[torch.Tensor, torch.Tensor]:
    ij = torch.stack(torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij"), -1)
    verts = torch.cat([ij.reshape(-1, 2).float() / n, torch.zeros(n * n, 1)], 1)
    verts[:, 0] += shift
    v = lambda i, j: i * n + j  # noqa: E731
    faces = [f for i in range(n - 1) for j in range(n - 1)
             for f in ((v(i, j), v(i + 1, j), v(i, j + 1)), (v(i + 1, j), v(i + 1, j + 1), v(i, j + 1)))]
    return verts, torch.tensor(faces)


va, fa = grid(10, 0.0)
vb, fb = grid(10, 5.0)
vertices = torch.cat([va, vb]).contiguous()
faces = torch.cat([fa, fb + len(va)]).contiguous()
index = segment_mesh(vertices, faces, 0.01, 5)
assert index.shape == (len(vertices),), index.shape
left, right = set(index[: len(va)].tolist()), set(index[len(va):].tolist())
assert not left & right, "a segment spans two disconnected components"
print(f"pass: pointseg.segment_mesh gave {len(left | right)} segments, none spanning components")
