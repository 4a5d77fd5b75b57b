"""Model stage of `cuforge setup milo`: MILo's own rendering path from the checkout, on a small
synthetic scene made here, with the stack's wheels and the env file's variables.

Usage: python milo_render.py CHECKOUT      (run by setup in the user's venv)

From the checkout (milo/ on sys.path, as MILo's scripts run; every package __init__ skipped
except gaussian_renderer's, which holds the renderer - see _checkout_import):
* `scene.cameras.Camera` and `scene.gaussian_model.GaussianModel` (create_from_pcd: initial
  scales from simple-knn's distCUDA2; compute_3D_filter);
* the Gaussian renderer with each rasterizer MILo selects: `render_radegs`
  (diff_gaussian_rasterization, --rasterizer radegs), `render_gof` (_gof, --rasterizer gof) and
  `render_imp` (_ms, the densification renders), forward + backward into the Gaussians;
* the patched `scene.mesh`: `MeshRasterizer`'s nvdiffrast context (NVDIFRAST_BACKEND), and
  `nvdiff_rasterization` of a sphere mesh once in one call and once chunked
  (MILO_RAST_TRI_CHUNK smaller than the mesh), which must agree pixel for pixel (ties allowed
  on at most 0.1 % of the covered pixels).
* fused-ssim between two renders, backward: MILo's photometric loss.

Exit 0 = pass, 77 = skipped (reason printed), anything else = fail.
"""

import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.append(str(Path(__file__).resolve().parent))
import _checkout_import  # noqa: E402

checkout = _checkout_import.checkout_argument("milo_render.py")
MILO = checkout / "milo"
PACKAGES = ["scene", "utils", "gaussian_renderer"]
_checkout_import.install(MILO, PACKAGES, run_init=["gaussian_renderer"])

import numpy as np  # noqa: E402
from fused_ssim import fused_ssim  # noqa: E402
from gaussian_renderer import render_imp  # noqa: E402
from gaussian_renderer.gof import render_gof  # noqa: E402
from gaussian_renderer.radegs import render_radegs  # noqa: E402
from scene import mesh as milo_mesh  # noqa: E402
from scene.cameras import Camera  # noqa: E402
from scene.gaussian_model import GaussianModel  # noqa: E402
from utils.graphics_utils import BasicPointCloud  # noqa: E402

H = W = 128
gen = np.random.default_rng(0)


def camera() -> Camera:
    """MILo's Camera 4 units in front of the origin, looking at it (3DGS convention)."""
    return Camera(colmap_id=0, R=np.eye(3), T=np.array([0.0, 0.0, 4.0]), FoVx=math.radians(50),
                  FoVy=math.radians(50), image=torch.zeros(3, H, W), gt_alpha_mask=None,
                  image_name="synthetic", uid=0, data_device="cuda")


def gaussians(cam: Camera) -> GaussianModel:
    """3,000 Gaussians on a unit sphere, initialised by MILo's own create_from_pcd."""
    points = gen.normal(size=(3000, 3))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    pcd = BasicPointCloud(points=points, colors=gen.uniform(size=(3000, 3)), normals=points)
    model = GaussianModel(3)
    model.create_from_pcd(pcd, 1.0)
    model.compute_3D_filter([cam])
    return model


def check_render(name: str, out: dict, model: GaussianModel) -> torch.Tensor:
    image = out["render"][:3]
    assert image.shape == (3, H, W), f"{name}: image {tuple(out['render'].shape)}"
    assert torch.isfinite(image).all(), f"{name}: non-finite pixels"
    covered = (image.abs().sum(0) > 1e-3).float().mean().item()
    assert 0.1 < covered < 0.9, f"{name}: the sphere covers {covered:.2f} of the image"
    for p in (model._xyz, model._features_dc, model._opacity, model._scaling, model._rotation):
        p.grad = None
    image.mean().backward(retain_graph=True)
    for label, p in (("xyz", model._xyz), ("colour", model._features_dc),
                     ("opacity", model._opacity)):
        assert p.grad is not None and torch.isfinite(p.grad).all(), f"{name}: no {label} gradient"
        assert p.grad.abs().sum() > 0, f"{name}: the {label} gradient is zero"
    return image.detach()


cam = camera()
model = gaussians(cam)
pipe = SimpleNamespace(debug=False, compute_cov3D_python=False, convert_SHs_python=False)
bg = torch.zeros(3, device="cuda")
renders = {
    "radegs": check_render("render_radegs", render_radegs(cam, model, pipe, bg), model),
    "gof": check_render("render_gof", render_gof(cam, model, pipe, bg), model),
    "ms": check_render("render_imp", render_imp(cam, model, pipe, bg), model),
}

# fused-ssim: the photometric loss MILo trains with, backward into the Gaussians
image = render_radegs(cam, model, pipe, bg)["render"][:3]
loss = 1 - fused_ssim(image[None].contiguous(), renders["ms"][None].contiguous())
model._xyz.grad = None
loss.backward()
assert torch.isfinite(loss) and model._xyz.grad is not None and torch.isfinite(model._xyz.grad).all()

# the patched mesh rasterization: the env file's backend, then one call against chunks
rasterizer = milo_mesh.MeshRasterizer(cameras=[cam])       # upstream default: use_opengl=True
backend = os.environ.get("NVDIFRAST_BACKEND", "")
ctx = rasterizer.gl_context
if backend == "cuda":
    assert type(ctx).__name__ == "RasterizeCudaContext", f"NVDIFRAST_BACKEND=cuda gave {ctx!r}"
lat, lon = torch.meshgrid(torch.linspace(0.05, math.pi - 0.05, 120),
                          torch.linspace(0, 2 * math.pi, 241)[:-1], indexing="ij")
verts = torch.stack([lat.sin() * lon.cos(), lat.sin() * lon.sin(), lat.cos()], -1).reshape(-1, 3)
rows, cols = lat.shape
faces = []
for r in range(rows - 1):
    for c in range(cols):
        a, b = r * cols + c, r * cols + (c + 1) % cols
        faces += [(a, b, a + cols), (b, b + cols, a + cols)]
verts, faces = verts.cuda(), torch.tensor(faces, dtype=torch.int32, device="cuda")
saved = os.environ.get("MILO_RAST_TRI_CHUNK")
try:
    os.environ["MILO_RAST_TRI_CHUNK"] = "0"
    whole = milo_mesh.nvdiff_rasterization(cam, H, W, verts, faces, return_indices_only=True,
                                           glctx=ctx)
    chunk = faces.shape[0] // 5 + 1
    os.environ["MILO_RAST_TRI_CHUNK"] = str(chunk)
    chunked = milo_mesh.nvdiff_rasterization(cam, H, W, verts, faces, return_indices_only=True,
                                             glctx=ctx)
finally:
    if saved is None:
        os.environ.pop("MILO_RAST_TRI_CHUNK", None)
    else:
        os.environ["MILO_RAST_TRI_CHUNK"] = saved
hit = whole >= 0
assert 0.1 < hit.float().mean().item() < 0.9, "the sphere mesh does not cover the image"
differ = ((whole != chunked) & hit).sum().item() / hit.sum().item()
assert differ <= 1e-3, f"chunked rasterization differs on {differ:.2%} of the covered pixels"

pairs = {f"{a}/{b}": (renders[a] - renders[b]).abs().mean().item()
         for a, b in (("radegs", "ms"), ("radegs", "gof"))}
skipped = _checkout_import.not_run_inits(MILO, PACKAGES)
print(f"pass: MILo's renderer from the checkout (render_radegs, render_gof, render_imp; "
      f"3000 Gaussians from create_from_pcd + distCUDA2) forward + backward, fused-ssim loss "
      f"{loss.item():.3f}; mesh.py on {type(ctx).__name__} (NVDIFRAST_BACKEND={backend or 'unset'})"
      f": {faces.shape[0]} triangles in one call and in chunks of {chunk} agree on "
      f"{1 - differ:.2%} of {hit.sum().item()} pixels; mean |difference| between variants "
      + ", ".join(f"{k} {v:.3f}" for k, v in pairs.items())
      + f"; {len(skipped)} package __init__s not run")
