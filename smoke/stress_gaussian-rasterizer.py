"""Stress for MILo's Gaussian rasterizers (plain/RaDe-GS, _ms, _gof): random scenes, each
rendered twice, the second time with its Gaussians in another order, every output checked.

    python smoke/stress_gaussian-rasterizer.py PACKAGE [--short | --calls N]

Why the order: the rasterizers duplicate each Gaussian once per tile it touches and sort the
copies by a (tile | view depth) key (CUB radix sort); each pixel then blends its tile's
Gaussians in that order. Depths here are all distinct, so the sorted order, and with it every
pixel, must not depend on the order the Gaussians came in: a wrong sort, a lost or doubled
copy, or a race in the duplication shows as a pixel that differs. Forward outputs must agree
within float rounding (radii exactly, per Gaussian, after the permutation); every fourth call
also backpropagates, whose gradients (accumulated with atomics) must agree within 1e-3.
29,956 calls see a fault of per-call rate 1e-4 with 95 % probability. Exit 0 = pass,
77 = skipped, else fail; ``--short`` is the run under compute-sanitizer."""

from __future__ import annotations

import importlib
import math
import sys
import time
from pathlib import Path

import torch

CALLS_95_AT_1E4 = math.ceil(math.log(0.05) / math.log(1 - 1e-4))   # 29,956
SHORT_CALLS = 40
TAN_HALF = math.tan(math.radians(30))
FORWARD_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
GRAD_RTOL = 1e-3


def compare(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor], order: torch.Tensor,
            spec) -> list[str]:
    """What differs between the outputs of a scene (``first``) and of the same scene with its
    Gaussians taken in ``order`` (``second``: its row j is the first's row ``order[j]``).
    ``spec`` is the check script's OUTPUTS: a ("P",) output is per Gaussian, the rest are
    images.

    >>> img, radii = torch.rand(3, 4, 4), torch.tensor([3, 0, 7])
    >>> order = torch.tensor([2, 0, 1])
    >>> spec = (("color", (3, "H", "W")), ("radii", ("P",)))
    >>> compare({"color": img, "radii": radii}, {"color": img.clone(), "radii": radii[order]}, order, spec)
    []
    >>> compare({"color": img, "radii": radii}, {"color": img.clone(), "radii": radii}, order, spec)
    ['radii: 3 of 3 Gaussians differ']
    """
    problems = []
    for name, shape in spec:
        a, b = first[name].detach(), second[name].detach()
        if tuple(shape) == ("P",):
            a = a[order]
            if a.is_floating_point():
                wrong = ~torch.isclose(a, b, **FORWARD_TOLERANCE)
            else:
                wrong = a != b
            if wrong.any():
                problems.append(f"{name}: {int(wrong.sum())} of {len(a)} Gaussians differ")
        elif not torch.allclose(a, b, **FORWARD_TOLERANCE):
            problems.append(f"{name}: max difference {float((a - b).abs().max()):.3g}")
    return problems


def compare_grads(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor],
                  order: torch.Tensor) -> list[str]:
    """Gradients of the two renders, per Gaussian, after the permutation: equal within
    GRAD_RTOL of each gradient's largest value (atomics add in another order)."""
    problems = []
    if first.keys() != second.keys():
        return [f"gradients for {sorted(first)} in one order, {sorted(second)} in the other"]
    for name, grad in first.items():
        a, b = grad[order], second[name]
        scale = float(a.abs().max()) or 1.0
        if not torch.allclose(a, b, rtol=GRAD_RTOL, atol=GRAD_RTOL * scale):
            problems.append(f"d/d{name}: max difference {float((a - b).abs().max()):.3g} "
                            f"(largest {scale:.3g})")
    return problems


def random_scene(n: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """n Gaussians in the camera's frustum at distinct depths in [1, 20] (no two sort keys
    alike), a few pixels to a few dozen across, random rotations, opacities and colours."""
    slots = (torch.arange(n) + 0.25 + 0.5 * torch.rand(n, generator=gen)) / n
    depth = (1.0 + 19.0 * slots)[torch.randperm(n, generator=gen)]
    xy = (torch.rand(n, 2, generator=gen) * 2 - 1) * 1.1 * TAN_HALF * depth[:, None]
    log_size = math.log(0.002) + torch.rand(n, 3, generator=gen) * math.log(15.0)
    return {
        "means3D": torch.cat([xy, depth[:, None]], 1),
        "scales": depth[:, None] * log_size.exp(),
        "rotations": torch.nn.functional.normalize(torch.randn(n, 4, generator=gen), dim=1),
        "opacities": 0.05 + 0.9 * torch.rand(n, 1, generator=gen),
        "colors_precomp": torch.rand(n, 3, generator=gen),
    }


LEARNED = ("means3D", "opacities", "colors_precomp")


def render(helper, rasterizer, package: str, scene: dict[str, torch.Tensor], spec, size,
           backward: bool) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Forward (and backward: the sum of the colour image) of ``scene`` on the GPU."""
    leaves = {k: v.cuda().requires_grad_(k in LEARNED) for k, v in scene.items()}
    used = helper.forward_args(rasterizer, package, leaves)
    height, width = size
    named = helper.unpack(package, rasterizer(**used), spec,
                          {"H": height, "W": width, "P": len(leaves["means3D"])})
    grads = {}
    if backward:
        named["color"].sum().backward()
        grads = {k: leaves[k].grad.detach() for k in LEARNED if leaves[k].grad is not None}
    return named, grads


def main() -> int:
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        return 77
    package = sys.argv[1]
    short = "--short" in sys.argv[2:]
    sys.path.insert(0, str(Path(__file__).resolve().parent))   # the shared helper beside us
    helper = importlib.import_module("_gaussian_rasterizer")
    module_name = package.replace("-", "_")
    mod = importlib.import_module(module_name)
    spec = helper.declared_outputs(package)
    calls = SHORT_CALLS if short else CALLS_95_AT_1E4
    if "--calls" in sys.argv:                                  # a quicker look, by hand
        calls = int(sys.argv[sys.argv.index("--calls") + 1])
    most = 5_000 if short else 60_000
    gen = torch.Generator().manual_seed(0)
    failures, seen, started = 0, [], time.monotonic()
    for i in range(calls):
        n = int(torch.randint(200, most, (1,), generator=gen))
        size = tuple(int(s) for s in torch.randint(48, 320, (2,), generator=gen))
        rasterizer = helper.make_rasterizer(mod, module_name, *size, TAN_HALF)
        scene = random_scene(n, gen)
        order = torch.randperm(n, generator=gen)
        backward = i % 4 == 0
        first, grads_a = render(helper, rasterizer, module_name, scene, spec, size, backward)
        second, grads_b = render(helper, rasterizer, module_name,
                                 {k: v[order] for k, v in scene.items()}, spec, size, backward)
        order = order.cuda()
        problems = compare(first, second, order, spec) + compare_grads(grads_a, grads_b, order)
        if problems:
            failures += 1
            if len(seen) < 5:
                seen.append(f"call {i} (n={n}, {size[1]}x{size[0]}): {'; '.join(problems)}")
    torch.cuda.synchronize()
    took = time.monotonic() - started
    print(f"{module_name} render vs the same scene in another order: {calls} calls, {failures} "
          f"failures, {took:.1f} s (a 1e-4 per-call fault is seen with "
          f"{100 * (1 - (1 - 1e-4) ** calls):.1f} %)")
    return importlib.import_module("_stress_verdict").verdict(
        calls, failures, seen, torch.cuda.get_device_name())


if __name__ == "__main__":
    sys.exit(main())
