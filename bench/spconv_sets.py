"""One spconv wheel against another, the same work on each (issue 51, point 2): a kernel set
(lean, 3d) must give what the full build gives. smoke/stress_spconv.py's PTv3-like sparse net
(k=5 stem, k=3 subm blocks, a stride-2 down and its inverse), forward + backward under the
implicit-GEMM default, in fp32 and under fp16 autocast, the same seeded scene and weights on
each wheel; each run saved, two saves compared as the model stage compares two algorithms
(smoke/checkout_models/pointcept_ptv3.py: relative L2 of the output, of all gradients and of
each gradient tensor, within its TOLERANCE). With ``--checkout``, the checkout's own
PointTransformerV3 as well (the model stage's scene, build and run; seeded weights), once with
spconv's default algorithms and once with ConvAlgo.Native.

    python bench/spconv_sets.py run OUT.pt [--voxels 60000] [--checkout POINTCEPT]
    python bench/spconv_sets.py compare A.pt B.pt             # exit 1 when they differ

Run once per wheel, in the env of that wheel (two wheels of one package cannot share a
process; for the checkout's PTv3, the venv `cuforge setup pointcept` made, which holds the
patched checkout), then compare: every run both files hold.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

import torch

SMOKE = Path(__file__).resolve().parents[1] / "smoke"
MODEL_STAGE = SMOKE / "checkout_models" / "pointcept_ptv3.py"
PRECISIONS = ("fp32", "fp16")


def on_cpu(result: tuple) -> tuple:
    """A run's (output, gradients, sparse conv outputs), moved to the CPU for saving."""
    feat, grads, layers = result
    return (feat.cpu(), {n: g.cpu() for n, g in grads.items()},
            [(name, t.float().cpu()) for name, t in layers])


def checkout_runs(checkout: Path) -> dict[str, tuple]:
    """The checkout's PTv3 (patched build_model), forward + backward on the model stage's
    scene, with spconv's default algorithms and with Native; the same seeded weights on every
    wheel."""
    import importlib

    stage = runpy.run_path(str(MODEL_STAGE), run_name="sets")
    sys.path.append(str(MODEL_STAGE.parent))
    import _checkout_import

    _checkout_import.install(checkout, ["pointcept"])
    importlib.import_module(stage["MODEL"])
    from pointcept.models.builder import build_model

    data = stage["scene"](device="cuda")
    runs = {}
    for algo in ("default", "native"):
        torch.manual_seed(0)
        model, _ = stage["build"](build_model, algo, algo)
        runs[f"ptv3 {algo}"] = on_cpu(stage["run"](model, data))
    return runs


def run(voxels: int, out: Path, checkout: Path | None) -> int:
    import numpy as np
    import spconv.pytorch as spconv
    from spconv.core import ConvAlgo
    from spconv.pytorch.conv import SparseConvolution
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        return 77
    lib = runpy.run_path(str(SMOKE / "stress_spconv.py"), run_name="sets")
    shape = (600, 500, 300)
    coords = torch.from_numpy(lib["scene_voxels"](voxels, shape, np.random.default_rng(0)))
    idx = torch.cat([torch.zeros(len(coords), 1, dtype=torch.int64), coords], 1).int().cuda()
    feats = torch.randn(len(coords), 6, generator=torch.Generator().manual_seed(3)).cuda()
    saved = {}
    for precision in PRECISIONS:
        torch.manual_seed(0)                      # the same weights on every wheel
        net = lib["ptv3_like"](ConvAlgo.MaskImplicitGemm)
        layers: list[tuple[str, torch.Tensor]] = []
        for name, m in net.named_modules():
            if isinstance(m, SparseConvolution):
                m.register_forward_hook(lambda _m, _i, o, name=name: layers.append(
                    (name, o.features.detach().float().cpu())))
        with torch.autocast("cuda", dtype=torch.float16, enabled=precision == "fp16"):
            y = net(spconv.SparseConvTensor(feats, idx, list(shape), 1)).features.float()
        weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(7)).cuda()
        (y * weights).sum().backward()
        grads = {n: p.grad.detach().float().cpu() for n, p in net.named_parameters()
                 if p.grad is not None}
        saved[precision] = (y.detach().cpu(), grads, layers)
    if checkout:
        saved |= checkout_runs(checkout)
    torch.save({"spconv": spconv.__file__, "voxels": len(coords), "runs": saved}, out)
    print(f"saved {out}: {len(coords)} voxels, {', '.join(saved)}, spconv from "
          f"{Path(spconv.__file__).parents[1]}")
    return 0


def compare(a: Path, b: Path) -> int:
    model_stage = runpy.run_path(str(MODEL_STAGE), run_name="compare")
    first, second = torch.load(a, weights_only=False), torch.load(b, weights_only=False)
    both = [name for name in first["runs"] if name in second["runs"]]
    if not both:
        print(f"FAILED: {a.name} and {b.name} hold no run of the same name")
        return 1
    failed = 0
    for name in both:
        what = f"between {a.name} and {b.name} ({name})"
        try:
            measured = model_stage["compare"](first["runs"][name], second["runs"][name],
                                              model_stage["TOLERANCE"], what)
            print(f"{name}: same within {model_stage['TOLERANCE']:g}: {measured}")
        except AssertionError as err:
            failed = 1
            print(f"{name}: FAILED: {err}")
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--voxels", type=int, default=60_000)
    r.add_argument("--checkout", type=Path, help="a Pointcept checkout patched by setup: "
                   "its PTv3 is run as well")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.what == "run":
        return run(args.voxels, args.out, args.checkout)
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
