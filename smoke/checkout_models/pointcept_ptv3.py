"""Model stage of `cuforge setup pointcept`: the checkout's own PointTransformerV3, built by the
checkout's own (patched) `build_model`, forward + backward on the GPU with the stack's wheels.

Usage: python pointcept_ptv3.py CHECKOUT      (run by setup in the user's venv, env file set)

1. `pointcept/models/point_transformer_v3/point_transformer_v3m1_base.py` is imported from the
   checkout with every package `__init__` skipped (_checkout_import: pointcept/models/__init__.py
   imports every model, modules.py pulls the trainer's hooks package).
2. The model is built twice through `pointcept.models.builder.build_model` - the function that
   patches/pointcept hooks - once with POINTCEPT_SPCONV_ALGO=default and once with `native`,
   with the same weights. The value the env file set is the one training will use.
3. The synthetic scene keeps one point per voxel of the grid, as Pointcept's GridSample does
   before every model: spconv's result for two points in one voxel is undefined (which of them
   a voxel's hash slot keeps is a race) and differs between algorithms. The first H200 run,
   without this, measured a relative L2 of 1.95e-01 between the algorithms.
4. Each runs forward + backward on the same synthetic scene with PTv3's randomness fixed: the
   order shuffles (`torch.randperm`, CPU generator) and DropPath (CUDA generator) draw from
   generators reseeded identically before each run, so both runs see the same permutations.
5. Outputs and gradients must agree: relative L2 error <= TOLERANCE for the output, for all
   gradients together, and for each parameter's gradient that is not zero in exact arithmetic
   (norm >= 1e-3 of the largest: a bias right before train-mode BatchNorm holds only noise).

Why 1e-2: both runs are fp32 and differ only in how spconv sums over the 27 kernel offsets
(Native: a gather-GEMM-scatter per offset with atomic adds; implicit GEMM: one fused GEMM in
fp32, as spconv 2.3.8 keeps TF32 off, `spconv.constants.SPCONV_ALLOW_TF32 = False`): another
summation order, ~1e-7 relative per sum. Even a TF32 kernel (~5e-4 per product) carried through
five encoder stages, attention softmax and train-mode BatchNorm stays near 1e-3; a broken kernel (the sm_121 failure, code for another arch) gives O(1) errors or
NaNs. 1e-2 sits an order above rounding and two below a real fault; the measured errors are
printed either way.

6. When flash_attn imports (and the GPU is sm_80 or newer), the same model is built with
   `enable_flash=True` and with `enable_flash=False` (both with the env file's spconv algorithm,
   DropPath off so that no random draw differs between the two paths: the eager path's
   attention dropout draws from the CUDA generator even at p = 0, flash-attn's does not), same
   weights, same scene, and compared the same way with FLASH_TOLERANCE. Without flash_attn
   this step says skipped and the check still passes on the rest.

Why 5e-2 for flash: PTv3's flash path casts q, k and v to bfloat16 (8 significant bits, unit
roundoff 2^-8 = 3.9e-3) and returns bfloat16, while the eager path stays in fp32. One attention
call then differs by a few 1e-3 relative; PTv3 has 22 attention blocks (encoder 2+2+2+6+2,
decoder 2+2+2+2) on one residual stream, whose independent rounding errors add up to about
sqrt(22) x 3e-3 = 1.4e-2 for the output, the same order for the gradients (flash's backward
also runs in bf16 with fp32 accumulation). 5e-2 leaves room above that; a kernel that computes
the wrong thing (code for another arch, a bad JIT) gives errors of O(1) (two unrelated outputs
of equal norm: sqrt(2)) or NaNs, and one wrong head of a block's heads still ~1e-1 or more.

Exit 0 = pass, 77 = skipped (reason printed), anything else = fail.
"""

import os
import sys
from pathlib import Path

import torch

TOLERANCE = 1e-2
FLASH_TOLERANCE = 5e-2
GRID_SIZE = 0.02
MODEL = "pointcept.models.point_transformer_v3.point_transformer_v3m1_base"


def one_point_per_voxel(coord: torch.Tensor, grid_size: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The points of one cloud that come first in their voxel, and their voxels: what
    GridSample's "train" mode hands the model (it keeps one point per voxel and returns the
    cloud's own grid coordinates)."""
    grid = torch.div(coord, grid_size, rounding_mode="floor").int()   # as GridSample does
    grid -= grid.min(0).values
    _, voxel = torch.unique(grid, dim=0, return_inverse=True)
    order = torch.arange(len(coord))
    first = torch.full((int(voxel.max()) + 1,), len(coord)).scatter_reduce(0, voxel, order, "amin")
    kept = first.sort().values
    return coord[kept], grid[kept]


def scene(seed: int = 0, device: str = "cpu") -> dict:
    """Two synthetic point clouds, points on a noisy plane and a sphere (surface-like, as
    scans), one point per voxel of GRID_SIZE. The grid coordinates go in with them: Point would
    otherwise voxelise the batch from its joint minimum, where two kept points of one cloud
    can share a voxel again."""
    gen = torch.Generator().manual_seed(seed)
    clouds, grids = [], []
    for n in (12000, 8000):
        plane = torch.rand(n // 2, 3, generator=gen) * torch.tensor([4.0, 4.0, 0.05])
        sphere = torch.randn(n - n // 2, 3, generator=gen)
        sphere = sphere / sphere.norm(dim=1, keepdim=True) + torch.tensor([2.0, 2.0, 1.2])
        coord, grid = one_point_per_voxel(torch.cat([plane, sphere]), GRID_SIZE)
        clouds.append(coord)
        grids.append(grid)
    coord = torch.cat(clouds)
    colour = torch.rand(coord.shape[0], 3, generator=gen)
    offset = torch.tensor([len(c) for c in clouds]).cumsum(0)
    return {"coord": coord.to(device), "grid_coord": torch.cat(grids).to(device),
            "feat": torch.cat([coord, colour], 1).to(device), "grid_size": GRID_SIZE,
            "offset": offset.to(device)}


def build(build_model, algo: str, configured: str, **options):
    """build_model with POINTCEPT_SPCONV_ALGO=algo, as a training run would build it;
    ``options`` go into the model's config (default: enable_flash=False)."""
    from spconv.pytorch.conv import SparseConvolution

    os.environ["POINTCEPT_SPCONV_ALGO"] = algo
    try:
        model = build_model(dict(type="PT-v3m1", in_channels=6, **{"enable_flash": False, **options}))
    finally:
        os.environ["POINTCEPT_SPCONV_ALGO"] = configured
    algos = {m.algo for m in model.modules() if isinstance(m, SparseConvolution)}
    return model.cuda().train(), algos


def run(model, data: dict):
    """Forward + backward: the output, the gradients, and each sparse convolution's output
    features in call order (to name the first layer where the algorithms part, on a failure)."""
    from spconv.pytorch.conv import SparseConvolution

    layers: list[tuple[str, torch.Tensor]] = []
    hooks = [m.register_forward_hook(
        lambda _m, _in, out, name=name: layers.append((name, out.features.detach().clone())))
        for name, m in model.named_modules() if isinstance(m, SparseConvolution)]
    torch.manual_seed(1234)                    # reseeds the CPU and every CUDA generator
    try:
        point = model({k: v.clone() if torch.is_tensor(v) else v for k, v in data.items()})
    finally:
        for hook in hooks:
            hook.remove()
    weights = torch.randn(point.feat.shape, generator=torch.Generator().manual_seed(7)).cuda()
    (point.feat * weights).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return point.feat.detach(), grads, layers


def first_parting_layer(ours: list, theirs: list) -> str:
    """The first sparse convolution whose outputs differ by more than rounding between the two
    runs (1e-4: one layer's fp32 summation order is ~1e-7), or "none"."""
    for (name, a), (_, b) in zip(ours, theirs):
        if a.shape != b.shape:
            return f"{name} (different shapes {tuple(a.shape)} and {tuple(b.shape)})"
        err = rel(a, b)
        if err > 1e-4:
            return f"{name} (relative L2 {err:.1e})"
    return "none"


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def compare(ours: tuple, theirs: tuple, tolerance: float, what: str) -> str:
    """Two runs' (output, gradients, sparse conv outputs) must agree within ``tolerance``
    (relative L2: the output, all gradients together, each gradient tensor that is not zero in
    exact arithmetic); raise AssertionError naming ``what``; return the measured errors."""
    (feat_a, grads_a, layers_a), (feat_b, grads_b, layers_b) = ours, theirs
    assert torch.isfinite(feat_a).all() and torch.isfinite(feat_b).all(), \
        f"non-finite PTv3 output ({what})"
    assert grads_a.keys() == grads_b.keys() and grads_b, \
        f"the two runs trained different parameters ({what})"
    out_err = rel(feat_a, feat_b)
    names = sorted(grads_b)
    all_err = rel(torch.cat([grads_a[n].flatten() for n in names]),
                  torch.cat([grads_b[n].flatten() for n in names]))
    # Per tensor, only gradients that are not zero in exact arithmetic: a bias right before a
    # train-mode BatchNorm (SerializedPooling's proj) gets rounding noise only (~1e-9), whose
    # relative error between two runs means nothing. "Not zero": at least 1e-3 of the largest.
    largest = max(grads_b[n].norm().item() for n in names)
    grad_errs = {n: rel(grads_a[n], grads_b[n]) for n in names
                 if grads_b[n].norm().item() >= 1e-3 * largest}
    worst = max(grad_errs, key=grad_errs.get)
    measured = (f"output rel. L2 {out_err:.1e}, all gradients {all_err:.1e}, worst of "
                f"{len(grad_errs)} gradient tensors {grad_errs[worst]:.1e} ({worst}); first "
                f"sparse conv of {len(layers_b)} to differ: {first_parting_layer(layers_a, layers_b)}")
    assert out_err <= tolerance, f"outputs differ {what}: {measured}"
    assert all_err <= tolerance, f"gradients differ {what}: {measured}"
    assert grad_errs[worst] <= tolerance, f"a gradient differs {what}: {measured}"
    return measured


def flash_missing() -> str:
    """Why the flash comparison cannot run here, or "" when it can."""
    try:
        import flash_attn
    except ImportError as err:
        return f"flash_attn not importable: {err}"
    major, minor = torch.cuda.get_device_capability()
    if major < 8:
        return f"flash-attn 2 needs sm_80 or newer, this GPU is sm_{major}{minor}"
    return ""


def flash_check(build_model, configured: str, data: dict) -> str:
    """enable_flash=True against False on the same weights and scene (docstring, point 6)."""
    missing = flash_missing()
    if missing:
        return f"flash: skipped ({missing})"
    import flash_attn

    eager, _ = build(build_model, configured, configured, enable_flash=False, drop_path=0.0)
    flash, _ = build(build_model, configured, configured, enable_flash=True, drop_path=0.0)
    flash.load_state_dict(eager.state_dict())
    flash_run, eager_run = run(flash, data), run(eager, data)
    # The eager path narrows a window to the smallest cloud when that has fewer points than
    # patch_size (flash keeps it): then the two would attend over different points.
    narrowed = {m.patch_size for m in eager.modules() if hasattr(m, "patch_size_max")
                and m.patch_size != m.patch_size_max}
    assert not narrowed, f"the scene is too small for the flash comparison (windows {narrowed})"
    measured = compare(flash_run, eager_run, FLASH_TOLERANCE, "between enable_flash=True and False")
    return (f"enable_flash=True (flash_attn {flash_attn.__version__}) vs False: {measured} "
            f"<= {FLASH_TOLERANCE:g}")


def main() -> None:
    sys.path.append(str(Path(__file__).resolve().parent))
    import _checkout_import

    checkout = _checkout_import.checkout_argument("pointcept_ptv3.py")
    _checkout_import.install(checkout, ["pointcept"])
    import importlib

    importlib.import_module(MODEL)                                  # registers "PT-v3m1"
    from pointcept.models.builder import build_model
    from spconv.core import ConvAlgo

    configured = os.environ.get("POINTCEPT_SPCONV_ALGO", "") or "default"
    default_model, default_algos = build(build_model, "default", configured)
    native_model, native_algos = build(build_model, "native", configured)
    native_model.load_state_dict(default_model.state_dict())
    assert native_algos == {ConvAlgo.Native}, f"the patched build_model left {native_algos}"
    assert default_algos != {ConvAlgo.Native}, \
        "spconv chose ConvAlgo.Native by default: the comparison would compare Native with itself"

    data = scene(device="cuda")
    torch.cuda.synchronize()
    measured = compare(run(native_model, data), run(default_model, data), TOLERANCE,
                       "between algorithms")
    flash = flash_check(build_model, configured, data)
    skipped = _checkout_import.not_run_inits(checkout, ["pointcept"])
    print(f"pass: the checkout's PointTransformerV3 ({data['coord'].shape[0]} points, one per "
          f"voxel; {sum(p.numel() for p in default_model.parameters())} parameters) forward + "
          f"backward; spconv default ({', '.join(sorted(a.name for a in default_algos))}) vs "
          f"Native: {measured} <= {TOLERANCE:g}; {flash}; env file "
          f"POINTCEPT_SPCONV_ALGO={configured}; {len(skipped)} package __init__s not run")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as failed:   # a verdict for people: one line, no traceback
        sys.exit(f"fail: {failed}")
