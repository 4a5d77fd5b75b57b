"""Model stage of `cuforge setup pointcept`: the checkout's own PointTransformerV3, built by the
checkout's own (patched) `build_model`, forward + backward on the GPU with the stack's wheels.

Usage: python pointcept_ptv3.py CHECKOUT      (run by setup in the user's venv, env file set)

1. `pointcept/models/point_transformer_v3/point_transformer_v3m1_base.py` is imported from the
   checkout with every package `__init__` skipped (_checkout_import: pointcept/models/__init__.py
   imports every model, modules.py pulls the trainer's hooks package).
2. The model is built twice through `pointcept.models.builder.build_model` - the function that
   patches/pointcept hooks - once with POINTCEPT_SPCONV_ALGO=default and once with `native`,
   with the same weights. The value the env file set is the one training will use.
3. Each runs forward + backward on the same synthetic scene with PTv3's randomness fixed: the
   order shuffles (`torch.randperm`, CPU generator) and DropPath (CUDA generator) draw from
   generators reseeded identically before each run, so both runs see the same permutations.
4. Outputs and gradients must agree: relative L2 error <= TOLERANCE for the output, for all
   gradients together, and for each parameter's gradient that is not zero in exact arithmetic
   (norm >= 1e-3 of the largest: a bias right before train-mode BatchNorm holds only noise).

Why 1e-2: both runs are fp32 and differ only in how spconv sums over the 27 kernel offsets
(Native: a gather-GEMM-scatter per offset with atomic adds; implicit GEMM: one fused GEMM, which
may use TF32 tensor cores on sm_80+: 10-bit mantissa, ~5e-4 relative per product). Rounding of
that size, carried through five encoder stages, attention softmax and train-mode BatchNorm, stays
near 1e-3; a broken kernel (the sm_121 failure, code for another arch) gives O(1) errors or
NaNs. 1e-2 sits an order above rounding and two below a real fault; the measured errors are
printed either way.

Exit 0 = pass, 77 = skipped (reason printed), anything else = fail.
"""

import os
import sys
from pathlib import Path

import torch

TOLERANCE = 1e-2
MODEL = "pointcept.models.point_transformer_v3.point_transformer_v3m1_base"

if len(sys.argv) != 2:
    sys.exit("usage: pointcept_ptv3.py CHECKOUT")
if not torch.cuda.is_available():
    print("skipped: no GPU (torch.cuda.is_available() is False)")
    sys.exit(77)

sys.path.append(str(Path(__file__).resolve().parent))
import _checkout_import  # noqa: E402

checkout = Path(sys.argv[1]).resolve()
_checkout_import.install(checkout, ["pointcept"])
import importlib  # noqa: E402

importlib.import_module(MODEL)                                  # registers "PT-v3m1"
from pointcept.models.builder import build_model  # noqa: E402
from spconv.core import ConvAlgo  # noqa: E402
from spconv.pytorch.conv import SparseConvolution  # noqa: E402

configured = os.environ.get("POINTCEPT_SPCONV_ALGO", "") or "default"
dev = torch.device("cuda")


def scene(seed: int = 0) -> dict:
    """Two synthetic point clouds: points on noisy planes and a sphere (surface-like, as scans)."""
    gen = torch.Generator().manual_seed(seed)
    clouds = []
    for n in (12000, 8000):
        plane = torch.rand(n // 2, 3, generator=gen) * torch.tensor([4.0, 4.0, 0.05])
        sphere = torch.randn(n - n // 2, 3, generator=gen)
        sphere = sphere / sphere.norm(dim=1, keepdim=True) + torch.tensor([2.0, 2.0, 1.2])
        clouds.append(torch.cat([plane, sphere]))
    coord = torch.cat(clouds)
    colour = torch.rand(coord.shape[0], 3, generator=gen)
    offset = torch.tensor([len(c) for c in clouds]).cumsum(0)
    return {"coord": coord.to(dev), "feat": torch.cat([coord, colour], 1).to(dev),
            "grid_size": 0.02, "offset": offset.to(dev)}


def build(algo: str):
    """build_model with POINTCEPT_SPCONV_ALGO=algo, as a training run would build it."""
    os.environ["POINTCEPT_SPCONV_ALGO"] = algo
    try:
        model = build_model(dict(type="PT-v3m1", in_channels=6, enable_flash=False))
    finally:
        os.environ["POINTCEPT_SPCONV_ALGO"] = configured
    algos = {m.algo for m in model.modules() if isinstance(m, SparseConvolution)}
    return model.to(dev).train(), algos


def run(model, data: dict):
    torch.manual_seed(1234)                    # reseeds the CPU and every CUDA generator
    point = model({k: v.clone() if torch.is_tensor(v) else v for k, v in data.items()})
    weights = torch.randn(point.feat.shape, generator=torch.Generator().manual_seed(7)).to(dev)
    (point.feat * weights).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return point.feat.detach(), grads


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


default_model, default_algos = build("default")
native_model, native_algos = build("native")
native_model.load_state_dict(default_model.state_dict())
assert native_algos == {ConvAlgo.Native}, f"the patched build_model left {native_algos}"
assert default_algos != {ConvAlgo.Native}, \
    "spconv chose ConvAlgo.Native by default: the comparison would compare Native with itself"

data = scene()
torch.cuda.synchronize()
feat_d, grads_d = run(default_model, data)
feat_n, grads_n = run(native_model, data)
assert torch.isfinite(feat_d).all() and torch.isfinite(feat_n).all(), "non-finite PTv3 output"
assert grads_d.keys() == grads_n.keys() and grads_d, "the two runs trained different parameters"
out_err = rel(feat_n, feat_d)
names = sorted(grads_d)
all_err = rel(torch.cat([grads_n[n].flatten() for n in names]),
              torch.cat([grads_d[n].flatten() for n in names]))
# Per tensor, only gradients that are not zero in exact arithmetic: a bias right before a
# train-mode BatchNorm (SerializedPooling's proj) gets rounding noise only (~1e-9), whose
# relative error between two runs means nothing. "Not zero": at least 1e-3 of the largest.
largest = max(grads_d[n].norm().item() for n in names)
grad_errs = {n: rel(grads_n[n], grads_d[n]) for n in names
             if grads_d[n].norm().item() >= 1e-3 * largest}
worst = max(grad_errs, key=grad_errs.get)
assert out_err <= TOLERANCE, f"outputs differ between algorithms: relative L2 {out_err:.2e}"
assert all_err <= TOLERANCE, f"gradients differ between algorithms: relative L2 {all_err:.2e}"
assert grad_errs[worst] <= TOLERANCE, \
    f"gradient of {worst} differs between algorithms: relative L2 {grad_errs[worst]:.2e}"
skipped = _checkout_import.not_run_inits(checkout, ["pointcept"])
print(f"pass: the checkout's PointTransformerV3 ({data['coord'].shape[0]} points, "
      f"{sum(p.numel() for p in default_model.parameters())} parameters) forward + backward; "
      f"spconv default ({', '.join(sorted(a.name for a in default_algos))}) vs Native: output "
      f"rel. L2 {out_err:.1e}, all gradients {all_err:.1e}, worst of {len(grad_errs)} gradient "
      f"tensors {grad_errs[worst]:.1e} ({worst}) <= {TOLERANCE:g}; "
      f"env file POINTCEPT_SPCONV_ALGO={configured}; {len(skipped)} package __init__s not run")
