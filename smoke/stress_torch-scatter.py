"""Stress for torch-scatter: scatter (sum, mean, max, min) and segment_csr (sum) repeated on
random sizes and index distributions (every third call puts all rows on at most 4 indices, so
thousands of atomics collide), each result checked against a float64 reference computed with
torch's own index_add / scatter_reduce on the same device.

    python smoke/stress_torch-scatter.py [--short | --calls N]

The first GPU run (H100, session 27) failed with a device-side assert: the hot calls drew
indices 0-3 while ``groups`` could be 1-3, and the reference's ``index_add_`` asserts on an
index out of range (torch-scatter itself writes out of bounds without a word). Every index is
now below ``groups`` (``random_case``), and tests/integration/test_stress_torch_scatter_oracle.py
holds the oracle on the CPU. Sums are compared within a bound that grows with the group's sum
of magnitudes (atomics add in any order); max and min exactly. Exit 0 = pass, 77 = skipped,
else fail; ``--short`` is the run under compute-sanitizer."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import ModuleType

import torch

CALLS = 5_000
SHORT_CALLS = 40
HOT_INDICES = 4
MAX_ROWS, MAX_GROUPS, COLUMNS = 400_000, 5_000, 8
# float32 atomics in any order: the error grows with the group's sum of |x|; one lost or
# doubled row (|x| ~ 0.8 on average) is far above it
SUM_RTOL, SUM_ATOL = 1e-6, 1e-5


def random_case(i: int, gen: torch.Generator, device: str) -> dict[str, torch.Tensor | int | bool]:
    """Call ``i``'s inputs: ``n`` rows of ``src`` [n, 8] onto ``groups`` outputs; every third
    call is hot (at most ``HOT_INDICES`` distinct indices). Every index is < ``groups``."""
    n = int(torch.randint(1, MAX_ROWS, (1,), generator=gen, device=device))
    groups = int(torch.randint(1, MAX_GROUPS, (1,), generator=gen, device=device))
    hot = i % 3 == 0
    high = min(HOT_INDICES, groups) if hot else groups
    index = torch.randint(0, high, (n,), generator=gen, device=device)
    src = torch.randn(n, COLUMNS, generator=gen, device=device)
    return {"n": n, "groups": groups, "hot": hot, "index": index, "src": src}


def reference(index: torch.Tensor, src: torch.Tensor, groups: int) -> dict[str, torch.Tensor]:
    """What each reduce must give, by torch's own ops in float64 (max/min in src's dtype: they
    are exact), and each group's sum of |x| (the sums' error bound)."""
    wide = src.double()
    zeros = torch.zeros(groups, src.shape[1], dtype=torch.float64, device=src.device)
    total = zeros.clone().index_add_(0, index, wide)
    counts = torch.bincount(index, minlength=groups).clamp(min=1).double()[:, None]
    expanded = index[:, None].expand_as(src)
    extreme = {name: torch.zeros(groups, src.shape[1], dtype=src.dtype, device=src.device)
               .scatter_reduce(0, expanded, src, how, include_self=False)
               for name, how in (("max", "amax"), ("min", "amin"))}
    return {"sum": total, "mean": total / counts, "magnitude": zeros.index_add_(0, index, wide.abs()),
            "counts": counts, **extreme}


def check(ts: ModuleType, index: torch.Tensor, src: torch.Tensor, groups: int) -> list[str]:
    """The reduces of ``ts`` (torch_scatter, or a stand-in) that differ from the reference."""
    want = reference(index, src, groups)
    bound = SUM_RTOL * want["magnitude"] + SUM_ATOL
    wrong = []
    for reduce in ("sum", "mean"):
        got = ts.scatter(src, index, 0, dim_size=groups, reduce=reduce).double()
        scale = want["counts"] if reduce == "mean" else 1.0
        if not bool(((got - want[reduce]).abs() <= bound / scale).all()):
            wrong.append(reduce)
    for reduce in ("max", "min"):
        if not torch.equal(ts.scatter(src, index, 0, dim_size=groups, reduce=reduce), want[reduce]):
            wrong.append(reduce)
    order = torch.argsort(index)
    counts = torch.bincount(index, minlength=groups)
    indptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    got = ts.segment_csr(src[order], indptr, reduce="sum").double()
    if not bool(((got - want["sum"]).abs() <= bound).all()):
        wrong.append("segment_csr")
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="a few calls (compute-sanitizer)")
    parser.add_argument("--calls", type=int, default=CALLS)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        return 77
    import torch_scatter

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _stress_verdict import verdict

    calls = SHORT_CALLS if args.short else args.calls
    gen = torch.Generator(device="cuda").manual_seed(0)
    failures, seen, started = 0, [], time.monotonic()
    for i in range(calls):
        case = random_case(i, gen, "cuda")
        wrong = check(torch_scatter, case["index"], case["src"], case["groups"])
        if wrong:
            failures += 1
            if len(seen) < 5:
                seen.append(f"call {i} (n={case['n']}, groups={case['groups']}, "
                            f"hot={case['hot']}): {', '.join(wrong)}")
    torch.cuda.synchronize()
    print(f"scatter sum/mean/max/min + segment_csr: {calls} calls, {failures} failures, "
          f"{time.monotonic() - started:.1f} s")
    return verdict(calls, failures, seen, torch.cuda.get_device_name())


if __name__ == "__main__":
    sys.exit(main())
