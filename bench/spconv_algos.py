"""spconv's algorithms side by side: a PTv3-like sparse net (smoke/stress_spconv.py's: k=5 stem,
k=3 subm blocks, a stride-2 down and up; fp16 autocast), forward + backward, under ConvAlgo.Native
and under the implicit-GEMM default, alternating in one process on one GPU, the same inputs.

    python bench/spconv_algos.py [--voxels 120000] [--reps 30]

Prints one JSON row: the median seconds per step of each algorithm and the ratio Native /
implicit GEMM (the Native workaround's cost; the DGX Spark report says ~4 %)."""

from __future__ import annotations

import argparse
import json
import runpy
import statistics
import sys
import time
from pathlib import Path

STRESS = Path(__file__).resolve().parents[1] / "smoke" / "stress_spconv.py"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--voxels", type=int, default=120_000)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    import numpy as np
    import torch
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        return 77
    import spconv.pytorch as spconv
    from spconv.core import ConvAlgo
    lib = runpy.run_path(str(STRESS), run_name="bench")
    rng = np.random.default_rng(0)
    shape = (600, 500, 300)
    coords = torch.from_numpy(lib["scene_voxels"](args.voxels, shape, rng))
    idx = torch.cat([torch.zeros(len(coords), 1, dtype=torch.int64), coords], 1).int().cuda()
    feats = torch.randn(len(coords), 6, device="cuda")
    nets = {a: lib["ptv3_like"](a) for a in (ConvAlgo.Native, ConvAlgo.MaskImplicitGemm)}
    nets[ConvAlgo.MaskImplicitGemm].load_state_dict(nets[ConvAlgo.Native].state_dict())

    def step(net) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.float16):
            y = net(spconv.SparseConvTensor(feats.requires_grad_(True), idx, list(shape), 1))
        y.features.float().square().mean().backward()
        torch.cuda.synchronize()
        return time.perf_counter() - t

    times: dict = {a: [] for a in nets}
    for _ in range(3):                       # warm-up: the tuner picks its kernels
        for net in nets.values():
            step(net)
    for _ in range(args.reps):               # alternate, so drift hits both alike
        for algo, net in nets.items():
            times[algo].append(step(net))
    med = {a.name: statistics.median(t) for a, t in times.items()}
    print(json.dumps({"bench": "spconv-algos", "voxels": len(coords), "reps": args.reps,
                      "device": torch.cuda.get_device_name(0), "median_s": med,
                      "native_over_implicit": round(med["Native"] / med["MaskImplicitGemm"], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
