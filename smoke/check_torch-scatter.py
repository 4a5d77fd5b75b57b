"""Kernel smoke for torch-scatter: scatter sum/mean/max on the GPU against torch's own
scatter_reduce on the CPU. Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

from torch_scatter import scatter, segment_csr  # noqa: E402

gen = torch.Generator().manual_seed(0)
src = torch.randn(10_000, 8, generator=gen)
index = torch.randint(0, 97, (10_000,), generator=gen)
for reduce, torch_name in (("sum", "sum"), ("mean", "mean"), ("max", "amax")):
    got = scatter(src.cuda(), index.cuda(), dim=0, dim_size=97, reduce=reduce).cpu()
    want = torch.zeros(97, 8).scatter_reduce(0, index[:, None].expand_as(src), src, torch_name,
                                              include_self=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"scatter {reduce}")
# segment_csr: reductions over contiguous segments given by CSR pointers
sorted_index, order = index.sort()
ptr = torch.zeros(98, dtype=torch.long)
ptr[1:] = torch.bincount(sorted_index, minlength=97).cumsum(0)
got = segment_csr(src[order].cuda(), ptr.cuda(), reduce="sum").cpu()
want = torch.stack([src[order][ptr[i]:ptr[i + 1]].sum(0) for i in range(97)])
torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg="segment_csr sum")
print("pass: torch_scatter scatter sum/mean/max and segment_csr match plain torch")
