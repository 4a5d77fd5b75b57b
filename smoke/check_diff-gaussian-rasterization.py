"""Kernel smoke for diff-gaussian-rasterization (RaDe-GS, as vendored in MILo): one Gaussian
forward + backward against analytic facts (see _gaussian_rasterizer.py), and forward's outputs as
its __init__.py returns them at MILo's pin. Exit 0 = pass, 77 = skipped (reason printed), else fail."""

import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the shared helper lives beside us
from _gaussian_rasterizer import run  # noqa: E402

# forward returns (color, radii, coord, mcoord, depth, mdepth, alpha, normal)
OUTPUTS = (("color", (3, "H", "W")), ("radii", ("P",)), ("coord", (3, "H", "W")),
           ("mcoord", (3, "H", "W")), ("depth", (1, "H", "W")), ("mdepth", (1, "H", "W")),
           ("alpha", (1, "H", "W")), ("normal", (3, "H", "W")))

run("diff_gaussian_rasterization", OUTPUTS)
