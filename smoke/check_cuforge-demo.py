"""Kernel smoke for cuforge-demo: saxpy and sum of squares on the GPU vs torch on the CPU.

Protocol (cuforge verify): exit 0 = pass, 77 = skipped (reason printed), anything else = fail.
"""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

import cuforge_demo

gen = torch.Generator().manual_seed(0)
x = torch.randn(100_003, generator=gen)
y = torch.randn(100_003, generator=gen)
expected = 2.5 * x + y
got = cuforge_demo.saxpy_(2.5, x.cuda(), y.cuda()).cpu()
torch.testing.assert_close(got, expected)
total = cuforge_demo.sumsq(x.cuda()).item()
assert abs(total - float((x.double() ** 2).sum())) < 1e-3 * total, total
print(f"pass: saxpy and sumsq match torch on {torch.cuda.get_device_name()} "
      f"(sm_{''.join(map(str, torch.cuda.get_device_capability()))})")
