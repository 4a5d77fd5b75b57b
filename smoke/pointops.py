"""Kernel smoke for Pointcept's pointops: knn_query over two batches against brute force.
Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

from pointops import knn_query  # noqa: E402

K = 8
gen = torch.Generator().manual_seed(0)
sizes = (700, 300)
xyz = torch.rand(sum(sizes), 3, generator=gen)
offset = torch.tensor([sizes[0], sum(sizes)], dtype=torch.int32)   # cumulative batch ends
idx, dist = knn_query(K, xyz.cuda().contiguous(), offset.cuda())
idx, dist = idx.cpu().long(), dist.cpu()

start = 0
for end in offset.tolist():
    d = torch.cdist(xyz[start:end].double(), xyz[start:end].double())
    want = d.topk(K, largest=False)
    torch.testing.assert_close(dist[start:end].sort(1).values.double(), want.values,
                               rtol=1e-4, atol=1e-5)
    local = idx[start:end]
    if start and local.min() >= start:                 # global indices (the usual layout)
        local = local - start
    got_sets = [set(row) for row in local.tolist()]
    want_sets = [set(row) for row in want.indices.tolist()]
    differ = sum(g != w for g, w in zip(got_sets, want_sets))
    assert differ <= 2, f"{differ} neighbour sets differ (more than distance ties explain)"
    start = end
print(f"pass: pointops.knn_query matches brute-force {K}-NN in {len(sizes)} batches")
