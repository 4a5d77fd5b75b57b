"""Shared by the pointops / pointops2 smokes: two batches of random points, the package's
k-NN against brute force (``torch.cdist``). Not a smoke script itself (leading underscore)."""

import torch

K = 8
SIZES = (700, 300)


def batches() -> tuple[torch.Tensor, torch.Tensor]:
    """Points ``[N, 3]`` and cumulative batch ends (Pointcept's ``offset``), on the CPU."""
    gen = torch.Generator().manual_seed(0)
    xyz = torch.rand(sum(SIZES), 3, generator=gen)
    offset = torch.tensor([SIZES[0], sum(SIZES)], dtype=torch.int32)
    return xyz, offset


def assert_knn(xyz: torch.Tensor, offset: torch.Tensor, idx: torch.Tensor,
               dist: torch.Tensor) -> None:
    """Distances equal brute force; neighbour sets equal up to distance ties."""
    idx, dist = idx.cpu().long(), dist.cpu()
    start = 0
    for end in offset.tolist():
        d = torch.cdist(xyz[start:end].double(), xyz[start:end].double())
        want = d.topk(K, largest=False)
        torch.testing.assert_close(dist[start:end].sort(1).values.double(), want.values,
                                   rtol=1e-4, atol=1e-5)
        local = idx[start:end]
        if start and local.min() >= start:             # global indices (the usual layout)
            local = local - start
        got_sets = [set(row) for row in local.tolist()]
        want_sets = [set(row) for row in want.indices.tolist()]
        differ = sum(g != w for g, w in zip(got_sets, want_sets))
        assert differ <= 2, f"{differ} neighbour sets differ (more than distance ties explain)"
        start = end
