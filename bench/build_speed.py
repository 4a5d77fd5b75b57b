"""Side-by-side build-speed ratios, measured in one run (never asserted in a timed test).

    nox -s bench                       # or: python bench/build_speed.py [--nvcc PATH] [--repeat 3]

Compiles the demo kernels (native/demo/src/kernels.cu) for several arches with
``nvcc -t 1`` and ``nvcc -t N`` (what cuforge puts in NVCC_APPEND_FLAGS), and prints the
times and the speed-up, plus peak RSS of nvcc's children.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "native" / "demo" / "src" / "kernels.cu"
ARCHES = ["90-real", "100-real", "120-real", "121"]


def compile_once(nvcc: str, threads: int, out: Path) -> tuple[float, float]:
    flags = []
    for a in ARCHES:
        num = a.removesuffix("-real")
        code = f"sm_{num}" if a.endswith("-real") else f"[sm_{num},compute_{num}]"
        flags.append(f"-gencode=arch=compute_{num},code={code}")
    start = time.perf_counter()
    subprocess.run([nvcc, "-c", str(KERNELS), "-o", str(out), "-O3", "-t", str(threads), *flags],
                   check=True, env={k: v for k, v in os.environ.items() if k != "NVCC_APPEND_FLAGS"})
    elapsed = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return elapsed, peak_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "nvcc")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    threads = max(2, min(os.cpu_count() or 1, len(ARCHES)))
    results: dict[int, list[float]] = {1: [], threads: []}
    peaks: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for t in results:                      # interleaved: same machine state for both
                secs, peak = compile_once(args.nvcc, t, Path(tmp) / f"k{t}.o")
                results[t].append(secs)
                peaks[t] = peak
    table = Table(title=f"nvcc, {len(ARCHES)} arches, {os.cpu_count()} cores (median of {args.repeat})")
    for col in ("nvcc -t", "seconds", "peak RSS of children (MB)"):
        table.add_column(col)
    for t, times in results.items():
        table.add_row(str(t), f"{statistics.median(times):.2f}", f"{peaks[t]:.0f}")
    Console().print(table)
    ratio = statistics.median(results[1]) / statistics.median(results[threads])
    Console().print(f"speed-up of -t {threads} over -t 1: [bold]{ratio:.2f}x[/]")


if __name__ == "__main__":
    main()
