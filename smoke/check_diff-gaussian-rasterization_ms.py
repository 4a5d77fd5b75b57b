"""Kernel smoke for diff-gaussian-rasterization_ms: one Gaussian forward + backward against analytic facts
(see _gaussian_rasterizer.py). Exit 0 = pass, 77 = skipped (reason printed), else fail."""

import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the shared helper lives beside us
from _gaussian_rasterizer import run  # noqa: E402

run("diff_gaussian_rasterization_ms")
