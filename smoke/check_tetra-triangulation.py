"""Smoke for tetra-triangulation (CGAL Delaunay, as MILo calls it: points in, int32 [M, 4]
tetrahedra out on the points' device). Checked against scipy's Delaunay when scipy is there, and
always against the empty-circumsphere property by brute force.
The triangulation runs on the CPU, so this test needs no GPU (the recipe declares
`[smoke] gpu = false`); with a GPU it also checks MILo's round trip of CUDA points.
Exit 0 = pass, anything else = fail."""

import torch

from tetranerf.utils.extension import cpp

gen = torch.Generator().manual_seed(0)
points = torch.rand(300, 3, generator=gen)
cells = cpp.triangulate(points)
assert cells.device.type == "cpu" and cells.dtype == torch.int32, (cells.device, cells.dtype)
where = "on the CPU"
if torch.cuda.is_available():
    on_gpu = cpp.triangulate(points.cuda())
    assert on_gpu.device.type == "cuda" and on_gpu.dtype == torch.int32, on_gpu.device
    same = {tuple(sorted(t)) for t in on_gpu.cpu().tolist()} == {tuple(sorted(t)) for t in cells.tolist()}
    assert same, "CUDA points triangulate differently from the same points on the CPU"
    where = "on the CPU and from CUDA points"
cells = cells.long()
assert cells.ndim == 2 and cells.shape[1] == 4 and len(cells) > len(points), cells.shape
assert cells.min() >= 0 and cells.max() == len(points) - 1

p = points.double()
a, b, c, d = (p[cells[:, i]] for i in range(4))
volume = torch.linalg.det(torch.stack([b - a, c - a, d - a], 1)).abs() / 6
assert (volume > 1e-12).all(), "degenerate tetrahedron"
# Circumcentre o of each tetrahedron: 2 (v - a) . o = |v|^2 - |a|^2 for v in b, c, d.
rows = 2 * torch.stack([b - a, c - a, d - a], 1)
rhs = torch.stack([(v * v).sum(1) - (a * a).sum(1) for v in (b, c, d)], 1)
centre = torch.linalg.solve(rows, rhs)
radius2 = ((a - centre) ** 2).sum(1)
dist2 = torch.cdist(centre, p).pow(2)
assert (dist2 >= radius2[:, None] * (1 - 1e-7) - 1e-12).all(), "a point lies inside a circumsphere"

try:
    from scipy.spatial import Delaunay
except ImportError:
    against = "the empty-circumsphere property (scipy not installed)"
else:
    ref = {tuple(sorted(t)) for t in Delaunay(points.double().numpy()).simplices.tolist()}
    got = {tuple(sorted(t)) for t in cells.tolist()}
    assert got == ref, f"{len(got ^ ref)} tetrahedra differ from scipy's Delaunay"
    against = "scipy's Delaunay and the empty-circumsphere property"
print(f"pass: {len(cells)} tetrahedra for {len(points)} points {where} match {against}")
