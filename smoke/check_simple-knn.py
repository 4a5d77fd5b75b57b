"""Kernel smoke for simple-knn: distCUDA2 (mean squared distance to the 3 nearest other points)
against a brute-force torch.cdist kNN. Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

from simple_knn._C import distCUDA2  # noqa: E402

gen = torch.Generator().manual_seed(0)
points = torch.rand(3000, 3, generator=gen) * torch.tensor([4.0, 2.0, 1.0])
got = distCUDA2(points.cuda()).cpu()
d2 = torch.cdist(points.double(), points.double()).pow(2)
d2.fill_diagonal_(float("inf"))
expected = d2.topk(3, largest=False).values.mean(1).float()
torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7)
print(f"pass: distCUDA2 matches brute-force 3-NN on {len(points)} points")
