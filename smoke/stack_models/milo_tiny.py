"""Model-stage check of the MILo stack (run by `cuforge setup milo` in the user's venv, with
the stack's variables set): a miniature of one MILo step on the GPU, all wheels together.

  points -> simple-knn distCUDA2 (initial Gaussian scales)
         -> diff-gaussian-rasterization render of one Gaussian (forward + backward)
         -> nvdiffrast rasterization of a small mesh with the backend NVDIFRAST_BACKEND picks
         -> fused-ssim between the two images, backward through both renderers.

Protocol: exit 0 = pass, 77 = skipped (reason printed), anything else = fail.
"""

import os
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU (torch.cuda.is_available() is False)")
    sys.exit(77)

sys.path.append(str(Path(__file__).resolve().parents[1]))   # smoke/: the shared rasterizer check
import _gaussian_rasterizer  # noqa: E402
import nvdiffrast.torch as dr  # noqa: E402
from fused_ssim import fused_ssim  # noqa: E402
from simple_knn._C import distCUDA2  # noqa: E402

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(0)

# 1. scales from the 3 nearest neighbours, as MILo initialises its Gaussians
points = (torch.rand(2000, 3, generator=gen) * 2 - 1).to(dev)
scales = torch.sqrt(distCUDA2(points).clamp_min(1e-7))
assert scales.shape == (2000,) and torch.isfinite(scales).all() and (scales > 0).all()

# 2. every Gaussian rasterizer variant of the stack: forward + backward against known facts,
#    with forward's outputs as each package's own smoke script declares them
for package in ("diff-gaussian-rasterization", "diff-gaussian-rasterization_ms"):
    _gaussian_rasterizer.run(package.replace("-", "_"),
                             _gaussian_rasterizer.declared_outputs(package))

# 3. a small mesh rasterized with the backend the env file chose (cuda: no OpenGL needed)
backend = os.environ.get("NVDIFRAST_BACKEND", "cuda")
ctx = dr.RasterizeCudaContext() if backend == "cuda" else dr.RasterizeGLContext()
grid = torch.stack(torch.meshgrid(torch.linspace(-0.9, 0.9, 9), torch.linspace(-0.9, 0.9, 9),
                                  indexing="xy"), -1).reshape(-1, 2)
pos = torch.cat([grid, torch.full((81, 1), 0.5), torch.ones(81, 1)], 1).to(dev)
quads = [(r * 9 + c, r * 9 + c + 1, r * 9 + c + 10) for r in range(8) for c in range(8)]
quads += [(r * 9 + c, r * 9 + c + 10, r * 9 + c + 9) for r in range(8) for c in range(8)]
tri = torch.tensor(quads, dtype=torch.int32, device=dev)
colour = torch.rand(81, 3, generator=gen).to(dev).requires_grad_(True)
rast, _ = dr.rasterize(ctx, pos[None].contiguous(), tri, resolution=[64, 64])
image, _ = dr.interpolate(colour[None], rast, tri)                   # [1, 64, 64, 3]
covered = (rast[..., 3] > 0).float().mean().item()
assert 0.7 < covered < 0.9, f"the mesh covers {covered:.2f} of the image, expected ~0.81"

# 4. the photometric loss MILo trains with, backward through the rasterizer
target = torch.rand(1, 3, 64, 64, generator=gen).to(dev)
loss = 1 - fused_ssim(image.permute(0, 3, 1, 2).contiguous(), target)
loss.backward()
assert torch.isfinite(loss) and colour.grad is not None and torch.isfinite(colour.grad).all()
assert colour.grad.abs().sum() > 0, "no gradient reached the mesh colours"
print(f"pass: MILo miniature (knn scales, 2 Gaussian rasterizers, nvdiffrast {backend} "
      f"backend, fused-ssim loss {loss.item():.3f}) forward + backward on "
      f"sm_{''.join(map(str, torch.cuda.get_device_capability()))}")
