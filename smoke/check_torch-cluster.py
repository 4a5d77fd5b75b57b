"""Kernel smoke for torch-cluster: knn and radius on the GPU against brute force.
Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

from torch_cluster import knn, radius  # noqa: E402

gen = torch.Generator().manual_seed(0)
x = torch.rand(500, 3, generator=gen)
y = torch.rand(50, 3, generator=gen)
d = torch.cdist(y.double(), x.double())

row, col = knn(x.cuda(), y.cuda(), k=4)
got = {(int(r), int(c)) for r, c in zip(row.cpu(), col.cpu())}
want = {(i, int(j)) for i in range(len(y)) for j in d[i].topk(4, largest=False).indices}
assert got == want, f"knn differs in {len(got ^ want)} pairs"

row, col = radius(x.cuda(), y.cuda(), r=0.15, max_num_neighbors=500)
got = {(int(r), int(c)) for r, c in zip(row.cpu(), col.cpu())}
clear = (d - 0.15).abs() > 1e-6                      # ignore pairs on the sphere itself
want = {(int(i), int(j)) for i, j in zip(*torch.nonzero((d < 0.15) & clear, as_tuple=True))}
assert want <= got and all(not clear[i, j] for i, j in got - want), "radius pairs differ"
print(f"pass: torch_cluster knn and radius ({len(got)} pairs) match brute force")
