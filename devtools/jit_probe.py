#!/usr/bin/env python3
"""Time flash-attn's first launch through the driver's PTX JIT (issue 30, docs/gpu-runs.md).

usage: python devtools/jit_probe.py [--head-dim 64] [--dtype fp16|bf16] [--causal]
       python devtools/jit_probe.py --warm [--head-dim 64]

Run it with a wheel that carries PTX only (``cuforge build --cuda-arch 8.0-virtual``): the
driver then JIT-compiles each kernel file's module at its first use. One probe does a forward
and a backward twice in one process and prints one JSON line: the first and second times, the
JIT cache's size afterwards (``CUDA_CACHE_PATH``, else the driver's default folder) and the
error against PyTorch's attention. Run it again in a new process on the same cache to see
whether the cache kept the result.

``--warm`` runs one probe per dtype x causal, in parallel processes, so that the kernel files
an upstream test slice of that head dim loads are JIT-compiled side by side (one process
compiles its modules one after another: ~40-55 s each on the H200) before the slice runs on
the warm cache. The slice still runs the JIT's output of the PTX; only the waiting is shorter.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def cache_bytes() -> int:
    root = Path(os.environ.get("CUDA_CACHE_PATH", Path.home() / ".nv" / "ComputeCache"))
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def probe(head_dim: int, dtype_name: str, causal: bool) -> dict:
    import torch
    import torch.nn.functional as F
    from flash_attn import flash_attn_func

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 256, 4, head_dim, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))

    def step() -> tuple[torch.Tensor, float, float]:
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = flash_attn_func(q, k, v, causal=causal)
        torch.cuda.synchronize()
        forward = time.perf_counter() - start
        out.float().sum().backward()
        torch.cuda.synchronize()
        return out, forward, time.perf_counter() - start - forward

    out, first_fwd, first_bwd = step()
    _, second_fwd, second_bwd = step()
    ref = F.scaled_dot_product_attention(*(t.transpose(1, 2).float() for t in (q, k, v)),
                                         is_causal=causal).transpose(1, 2)
    return {"head_dim": head_dim, "dtype": dtype_name, "causal": causal,
            "first_fwd_s": round(first_fwd, 2), "first_bwd_s": round(first_bwd, 2),
            "second_fwd_s": round(second_fwd, 4), "second_bwd_s": round(second_bwd, 4),
            "jit_cache_bytes": cache_bytes(),
            "rel_l2_vs_sdpa": ((out.float() - ref).norm() / ref.norm()).item(),
            "cache_maxsize": os.environ.get("CUDA_CACHE_MAXSIZE", "default")}


def warm(head_dim: int) -> int:
    """One probe process per dtype x causal, side by side; their JSON lines, then the total."""
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--head-dim", str(head_dim),
                               "--dtype", dtype, *(["--causal"] if causal else [])])
             for dtype in ("fp16", "bf16") for causal in (False, True)]
    failed = sum(p.wait() != 0 for p in procs)
    print(json.dumps({"warm_s": round(time.perf_counter() - start, 1), "failed": failed,
                      "jit_cache_bytes": cache_bytes()}))
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--warm", action="store_true", help="every dtype x causal, in parallel")
    args = parser.parse_args()
    if args.warm:
        return warm(args.head_dim)
    print(json.dumps(probe(args.head_dim, args.dtype, args.causal)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
