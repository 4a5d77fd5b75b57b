"""Kernel smoke for torch-sparse: sparse x dense products on the GPU against dense matmul.
Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

from torch_sparse import SparseTensor  # noqa: E402

gen = torch.Generator().manual_seed(0)
dense = torch.randn(300, 200, generator=gen) * (torch.rand(300, 200, generator=gen) < 0.05)
other = torch.randn(200, 16, generator=gen)
sparse = SparseTensor.from_dense(dense.cuda())
for reduce in ("sum", "mean", "max"):
    got = sparse.matmul(other.cuda(), reduce=reduce).cpu()
    mask = dense != 0
    terms = torch.where(mask[..., None], dense[..., None] * other[None], float("nan"))
    if reduce == "sum":
        want = dense @ other
    elif reduce == "mean":
        want = (dense @ other) / mask.sum(1, keepdim=True).clamp(min=1)
    else:
        want = torch.nan_to_num(terms.nan_to_num(float("-inf")).amax(1), neginf=0.0)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=f"spmm {reduce}")
print("pass: torch_sparse spmm sum/mean/max match dense references")
