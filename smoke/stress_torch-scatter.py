"""Stress for torch-scatter: scatter (sum, mean, max, min) and segment_csr repeated on random
sizes and index distributions (a few hot indices make thousands of atomics collide), each result
checked against torch's own scatter_reduce / index_add on the same device. Exit 0 = pass,
77 = skipped, else fail; ``--short`` is the run under compute-sanitizer."""

import sys
import time

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

import torch_scatter

calls = 40 if "--short" in sys.argv else 5_000
gen = torch.Generator(device="cuda").manual_seed(0)
failures, seen, started = 0, [], time.monotonic()
for i in range(calls):
    n = int(torch.randint(1, 400_000, (1,), generator=gen, device="cuda"))
    groups = int(torch.randint(1, 5_000, (1,), generator=gen, device="cuda"))
    hot = i % 3 == 0                       # every third call: most rows on 4 indices
    index = torch.randint(0, 4 if hot else groups, (n,), generator=gen, device="cuda")
    src = torch.randn(n, 8, generator=gen, device="cuda")
    wrong = []
    got = torch_scatter.scatter(src, index, 0, dim_size=groups, reduce="sum")
    want = torch.zeros(groups, 8, device="cuda").index_add_(0, index, src)
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-3):
        wrong.append("sum")
    for reduce, amax in (("max", "amax"), ("min", "amin")):
        got = torch_scatter.scatter(src, index, 0, dim_size=groups, reduce=reduce)
        want = torch.zeros(groups, 8, device="cuda").scatter_reduce(
            0, index[:, None].expand_as(src), src, amax, include_self=False)
        if not torch.equal(got, want):
            wrong.append(reduce)
    order = torch.argsort(index)
    counts = torch.bincount(index, minlength=groups)
    indptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    got = torch_scatter.segment_csr(src[order], indptr, reduce="sum")
    if not torch.allclose(got, want_sum := torch.zeros(groups, 8, device="cuda").index_add_(
            0, index, src), rtol=1e-4, atol=1e-3):
        wrong.append("segment_csr")
    if wrong:
        failures += 1
        if len(seen) < 5:
            seen.append(f"call {i} (n={n}, groups={groups}, hot={hot}): {', '.join(wrong)}")
torch.cuda.synchronize()
print(f"scatter sum/max/min + segment_csr: {calls} calls, {failures} failures, "
      f"{time.monotonic() - started:.1f} s")
if failures:
    print("\n".join(seen), file=sys.stderr)
    print(f"fail: {failures} wrong results in {calls} calls", file=sys.stderr)
    sys.exit(1)
print(f"pass: {calls} calls, 0 failures on {torch.cuda.get_device_name()}")
