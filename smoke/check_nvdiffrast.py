"""Kernel smoke for nvdiffrast 0.4.0: rasterize one known triangle with RasterizeCudaContext
and interpolate an attribute; coverage and values are checked against the analytic answer.
Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

import nvdiffrast.torch as dr  # noqa: E402

N = 64
# Clip-space triangle (w = 1) covering the lower-left half of the viewport: x + y < 0 in NDC.
pos = torch.tensor([[[-1.0, -1.0, 0.5, 1.0], [1.0, -1.0, 0.5, 1.0], [-1.0, 1.0, 0.5, 1.0]]],
                   device="cuda")
tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device="cuda")
rast, _ = dr.rasterize(dr.RasterizeCudaContext(), pos, tri, resolution=[N, N])
# Attribute = NDC x of each vertex: interpolation must return each pixel centre's x.
ndc_x, _ = dr.interpolate(pos[..., :1].contiguous(), rast, tri)

centres = (torch.arange(N, device="cuda") + 0.5) / N * 2 - 1
y, x = torch.meshgrid(centres, centres, indexing="ij")
inside = (x + y) < 0
clear = (x + y).abs() > 1e-3                     # pixel centres exactly on the edge are ties
covered = rast[0, ..., 3] > 0
assert torch.equal(covered[clear], inside[clear]), "coverage differs from the triangle"
assert (rast[0, ..., 3][covered] == 1).all(), "triangle id is not 1"
torch.testing.assert_close(ndc_x[0, ..., 0][covered], x[covered], atol=1e-4, rtol=0)
torch.testing.assert_close(rast[0, ..., 2][covered], torch.full_like(x[covered], 0.5))
print(f"pass: nvdiffrast rasterized {int(covered.sum())} pixels of a known triangle exactly")
