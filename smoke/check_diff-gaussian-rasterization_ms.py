"""Kernel smoke for diff-gaussian-rasterization_ms (Mini-Splatting2, as vendored in MILo): one
Gaussian forward + backward against analytic facts (see _gaussian_rasterizer.py), and forward's
outputs as its __init__.py returns them at MILo's pin.
Exit 0 = pass, 77 = skipped (reason printed), else fail."""

import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the shared helper lives beside us
from _gaussian_rasterizer import run  # noqa: E402

# forward(means3D, means2D, opacities, culling, ..., flag_max_count) returns
# (color, radii, accum_max_count): a float count per Gaussian
OUTPUTS = (("color", (3, "H", "W")), ("radii", ("P",)), ("accum_max_count", ("P",)))

run("diff_gaussian_rasterization_ms", OUTPUTS)
