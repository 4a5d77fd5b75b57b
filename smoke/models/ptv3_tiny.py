"""Model-level check (like the published verifier's model stage): a tiny PTv3-style forward
over synthetic points using spconv (sparse conv embedding), pointops (k-NN grouping) and
torch-scatter (segment pooling). Passes when every output is finite and shapes are right.

Protocol: exit 0 = pass, 77 = skipped (reason printed), anything else = fail.
"""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

import pointops  # noqa: E402
import spconv.pytorch as spconv  # noqa: E402
from torch_scatter import segment_csr  # noqa: E402

torch.manual_seed(0)
dev = torch.device("cuda")
counts = [3000, 2000]                                  # two point clouds in one batch
coord = torch.rand(sum(counts), 3, device=dev) * 4.0
offset = torch.tensor(counts, device=dev).cumsum(0).int()
batch = torch.repeat_interleave(torch.arange(len(counts), device=dev), torch.tensor(counts, device=dev))
feat = torch.rand(sum(counts), 6, device=dev)

# 1. sparse-conv embedding on a 0.05 grid (PTv3's stem)
grid = (coord / 0.05).int()
indices = torch.cat([batch[:, None].int(), grid], dim=1).contiguous()
x = spconv.SparseConvTensor(feat, indices, grid.max(0).values.tolist(), len(counts))
stem = spconv.SparseSequential(spconv.SubMConv3d(6, 32, 3, indice_key="stem"),
                               torch.nn.BatchNorm1d(32), torch.nn.ReLU()).to(dev)
emb = stem(x).features                                  # [N, 32]

# 2. local attention over k nearest neighbours (pointops k-NN)
idx, _ = pointops.knn_query(16, coord, offset)          # [N, 16]
qkv = torch.nn.Linear(32, 96).to(dev)(emb).view(-1, 3, 32)
q, k, v = qkv[:, 0], qkv[:, 1][idx.long()], qkv[:, 2][idx.long()]
attn = torch.softmax((q[:, None, :] * k).sum(-1) / 32 ** 0.5, dim=-1)
out = emb + (attn[..., None] * v).sum(1)

# 3. per-cloud pooling with torch-scatter, then a classifier head
ptr = torch.cat([offset.new_zeros(1), offset]).long()
pooled = segment_csr(out, ptr, reduce="mean")           # [B, 32]
logits = torch.nn.Linear(32, 10).to(dev)(pooled)
logits.sum().backward()

assert emb.shape == (sum(counts), 32) and logits.shape == (len(counts), 10)
assert torch.isfinite(out).all() and torch.isfinite(logits).all(), "non-finite outputs"
print(f"pass: tiny PTv3-style forward/backward on {sum(counts)} points, logits finite")
