"""Kernel smoke for torch-geometric: PyG must find the three compiled packages under it
(torch-scatter, torch-sparse, torch-cluster) and use them on the GPU. A knn graph (torch-cluster)
feeds a GCN layer run twice, on the edge list and on a torch-sparse adjacency, and both are
compared with the dense formula D^-1/2 (A + I) D^-1/2 X W^T + b.
Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

import torch_geometric.typing as pyg_typing  # noqa: E402

# PyG silently falls back to plain torch when an import of these fails: make that a failure
backends = {"torch-scatter": pyg_typing.WITH_TORCH_SCATTER,
            "torch-sparse": pyg_typing.WITH_TORCH_SPARSE,
            "torch-cluster": pyg_typing.WITH_TORCH_CLUSTER}
missing = sorted(name for name, found in backends.items() if not found)
assert not missing, f"torch_geometric runs without {', '.join(missing)} (their import failed)"

from torch_geometric.nn import GCNConv, knn_graph  # noqa: E402
from torch_sparse import SparseTensor  # noqa: E402

NODES, K = 400, 6
gen = torch.Generator().manual_seed(0)
pos = torch.rand(NODES, 3, generator=gen, dtype=torch.float64)
features = torch.randn(NODES, 5, generator=gen, dtype=torch.float64)

edge_index = knn_graph(pos.cuda(), k=K, loop=False)     # row 0: neighbour, row 1: centre
got = {(int(c), int(n)) for n, c in edge_index.t().cpu()}
dist = torch.cdist(pos, pos).fill_diagonal_(float("inf"))
want = {(i, int(j)) for i in range(NODES) for j in dist[i].topk(K, largest=False).indices}
assert got == want, f"knn_graph differs from brute force in {len(got ^ want)} edges"

conv = GCNConv(5, 8).double().cuda()
x = features.cuda()
on_edges = conv(x, edge_index)
adj_t = SparseTensor(row=edge_index[1], col=edge_index[0], sparse_sizes=(NODES, NODES))
on_sparse = conv(x, adj_t)

adjacency = torch.eye(NODES, dtype=torch.float64)
adjacency[edge_index[1].cpu(), edge_index[0].cpu()] = 1.0
scale = adjacency.sum(1).rsqrt()
weight, bias = conv.lin.weight.detach().cpu(), conv.bias.detach().cpu()
dense = (scale[:, None] * adjacency * scale[None, :]) @ features @ weight.t() + bias
for name, out in (("edge list", on_edges), ("torch-sparse adjacency", on_sparse)):
    error = (out.detach().cpu() - dense).abs().max().item()
    assert error < 1e-9, f"GCNConv on the {name} differs from the dense formula by {error:.3g}"
print(f"pass: torch_geometric knn_graph ({edge_index.shape[1]} edges) and GCNConv on edges and on a "
      f"SparseTensor match the dense formula, with torch-scatter/-sparse/-cluster found")
