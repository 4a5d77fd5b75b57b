"""Stress for cuforge-demo: saxpy and sum of squares repeated on random sizes (a block-tail
and a reduction fault show as a wrong value in some call, not in every call), each result
checked against torch on the CPU. The smoke protocol: exit 0 = pass, 77 = skipped, else fail;
``--short`` is the run under compute-sanitizer. One line per section: calls, failures, time."""

import sys
import time

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

import cuforge_demo

calls = 50 if "--short" in sys.argv else 5_000
gen = torch.Generator().manual_seed(0)
failures, started = 0, time.monotonic()
for i in range(calls):
    n = int(torch.randint(1, 300_000, (1,), generator=gen))
    x, y = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    got = cuforge_demo.saxpy_(2.5, x.cuda(), y.cuda()).cpu()
    total = cuforge_demo.sumsq(x.cuda()).item()
    want = float((x.double() ** 2).sum())
    if not torch.allclose(got, 2.5 * x + y) or abs(total - want) > 1e-3 * max(want, 1.0):
        failures += 1
print(f"saxpy+sumsq: {calls} calls, {failures} failures, {time.monotonic() - started:.1f} s")
if failures:
    print(f"fail: {failures} wrong results in {calls} calls", file=sys.stderr)
    sys.exit(1)
print(f"pass: {calls} calls, 0 failures on {torch.cuda.get_device_name()}")
