"""Shared smoke check for MILo's three Gaussian rasterizers (plain/RaDe-GS, _ms, _gof).

Their Python APIs differ (extra settings such as kernel_size, subpixel_offset, require_depth;
extra forward arguments such as dc, culling, flag_max_count), so settings and arguments are
filled from the names each module declares. One Gaussian sits on the optical axis, coloured by
``colors_precomp`` over a black background. Reference facts that hold for every variant:
  * the brightest pixel is the image centre, the corners are background (0);
  * the centre pixel's RGB is proportional to the colour (alpha is the same for each channel);
  * the image is linear in the colour: d(sum image[c]) / d colour[c] = sum(image[c]) / colour[c];
  * a second Gaussian behind the camera is culled (radius 0) and gets no gradient.
What ``forward`` returns differs too, and each per-package script declares it (``OUTPUTS``:
names and shapes, in order, as the variant's ``__init__.py`` at MILo's pin returns them); the
values must match exactly, and ``color[:3]`` is the RGB image the facts above are checked on.
A variant's own facts (the _gof extra channels, its ``integrate``) come as a ``more`` callback.
Run by the per-package scripts, which check for a GPU first.
"""

from __future__ import annotations

from collections.abc import Callable
import ast
import importlib
import inspect
import math
import sys
from pathlib import Path

import torch

SIZE = 33                                   # odd: the principal point is pixel (16, 16)
COLOR = (0.2, 0.6, 0.9)
DEPTH = 3.0                                 # the visible Gaussian's distance on the optical axis
OPACITY = 0.8

# An output spec: ((name, shape), ...) where a shape holds ints, "H"/"W" (the image) and "P"
# (the number of Gaussians).
Outputs = tuple[tuple[str, tuple[int | str, ...]], ...]


def declared_outputs(package: str) -> Outputs:
    """``OUTPUTS`` as ``check_<package>.py`` beside this file declares it (read, not run: the
    script renders on import). For callers that check several variants at once."""
    script = Path(__file__).resolve().parent / f"check_{package}.py"
    return next(ast.literal_eval(node.value) for node in ast.parse(script.read_text()).body
                if isinstance(node, ast.Assign)
                and [getattr(t, "id", "") for t in node.targets] == ["OUTPUTS"])


def unpack(module_name: str, out, spec: Outputs, sizes: dict[str, int]) -> dict[str, torch.Tensor]:
    """``out`` named by ``spec``; exits with a failure unless count and shapes match exactly."""
    values = out if isinstance(out, (tuple, list)) else (out,)
    got = [tuple(v.shape) if torch.is_tensor(v) else type(v).__name__ for v in values]
    want = [tuple(sizes.get(d, d) for d in shape) for _, shape in spec]
    if got != want:
        names = ", ".join(name for name, _ in spec)
        sys.exit(f"fail: {module_name} forward returned {got}; the code at MILo's pin returns "
                 f"({names}) shaped {want}")
    return {name: v for (name, _), v in zip(spec, values)}


def projection(znear: float, zfar: float, tan_half: float) -> torch.Tensor:
    """3DGS's getProjectionMatrix for a symmetric frustum (z towards the scene)."""
    p = torch.zeros(4, 4)
    p[0, 0] = p[1, 1] = 1.0 / tan_half
    p[3, 2] = 1.0
    p[2, 2] = zfar / (zfar - znear)
    p[2, 3] = -(zfar * znear) / (zfar - znear)
    return p


def make_rasterizer(mod, module_name: str, height: int, width: int, tan_half: float):
    """The module's GaussianRasterizer for a pinhole camera at the origin looking down +z
    (world == camera), every settings field filled from the names the module declares."""
    dev = torch.device("cuda")
    view = torch.eye(4, device=dev)                          # world == camera, stored transposed
    proj = (view @ projection(0.01, 100.0, tan_half).T.to(dev)).contiguous()
    known = {
        "image_height": height, "image_width": width, "tanfovx": tan_half, "tanfovy": tan_half,
        "bg": torch.zeros(3, device=dev), "scale_modifier": 1.0, "viewmatrix": view,
        "projmatrix": proj, "sh_degree": 0, "campos": torch.zeros(3, device=dev),
        "prefiltered": False, "debug": False, "antialiasing": False, "kernel_size": 0.0,
        "subpixel_offset": torch.zeros(height, width, 2, device=dev),
        "require_coord": False, "require_depth": True,
    }
    fields = mod.GaussianRasterizationSettings._fields
    unknown = [f for f in fields if f not in known]
    if unknown:
        sys.exit(f"fail: {module_name}.GaussianRasterizationSettings has fields this smoke test "
                 f"does not know: {unknown}")
    return mod.GaussianRasterizer(
        raster_settings=mod.GaussianRasterizationSettings(**{f: known[f] for f in fields}))


def forward_args(rasterizer, module_name: str, scene: dict[str, torch.Tensor]) -> dict:
    """The arguments the rasterizer's ``forward`` takes, for ``scene`` (means3D,
    colors_precomp, opacities, scales, rotations: one row per Gaussian)."""
    means3d = scene["means3D"]
    args = {
        "means3D": means3d, "means2D": torch.zeros_like(means3d, requires_grad=True),
        "opacities": scene["opacities"], "colors_precomp": scene["colors_precomp"], "shs": None,
        "dc": None, "scales": scene["scales"], "cov3D_precomp": None,
        "rotations": scene["rotations"],
        "culling": torch.zeros(len(means3d), dtype=torch.bool, device=means3d.device),
        "flag_max_count": True, "view2gaussian_precomp": None,
    }
    params = inspect.signature(rasterizer.forward).parameters
    missing = [n for n, p in params.items() if n not in args and p.default is p.empty]
    if missing:
        sys.exit(f"fail: {module_name}.GaussianRasterizer.forward needs {missing}, "
                 "which this smoke test does not know")
    return {n: v for n, v in args.items() if n in params}


def run(module_name: str, outputs: Outputs,
        more: Callable[[object, dict, dict[str, torch.Tensor]], str] | None = None) -> None:
    """Render, check ``outputs`` and the shared facts, backpropagate, then run ``more``
    (rasterizer, forward arguments, named outputs) -> a note for the pass line."""
    mod = importlib.import_module(module_name)
    dev = torch.device("cuda")
    rasterizer = make_rasterizer(mod, module_name, SIZE, SIZE, math.tan(math.radians(30)))
    means3d = torch.tensor([[0.0, 0.0, DEPTH], [0.0, 0.0, -DEPTH]], device=dev, requires_grad=True)
    colors = torch.tensor([COLOR, COLOR], device=dev, requires_grad=True)
    opacity = torch.full((2, 1), OPACITY, device=dev, requires_grad=True)
    used = forward_args(rasterizer, module_name, {
        "means3D": means3d, "colors_precomp": colors, "opacities": opacity,
        "scales": torch.full((2, 3), 0.15, device=dev),
        "rotations": torch.tensor([[1.0, 0, 0, 0]] * 2, device=dev)})
    named = unpack(module_name, rasterizer(**used), outputs, {"H": SIZE, "W": SIZE, "P": 2})
    image, radii = named["color"][:3], named["radii"]
    assert not radii.is_floating_point(), f"radii are {radii.dtype}, not integers"

    c = SIZE // 2
    peak = image.sum(0)
    assert peak.argmax().item() == c * SIZE + c, "brightest pixel is not the image centre"
    assert image[:, 0, 0].abs().max() < 1e-6, "corner is not background"
    centre = image[:, c, c]
    ratio = centre / torch.tensor(COLOR, device=dev)
    assert 0.2 < ratio.mean() <= OPACITY + 1e-4, f"centre alpha {ratio.mean():.3f} out of range"
    torch.testing.assert_close(ratio, ratio.mean().expand(3), rtol=1e-4, atol=1e-6)
    assert radii[0].item() > 0, "the visible Gaussian has radius 0"
    assert radii[1].item() == 0, "a Gaussian behind the camera was not culled"
    if "alpha" in named:              # accumulated opacity: over black, the RGB / colour ratio
        torch.testing.assert_close(named["alpha"][0, c, c], ratio.mean(), rtol=1e-3, atol=1e-5)

    image.sum().backward()
    expected = image.detach().sum((1, 2)) / torch.tensor(COLOR, device=dev)
    torch.testing.assert_close(colors.grad[0], expected, rtol=1e-3, atol=1e-5)
    assert colors.grad[1].abs().max() == 0, "the culled Gaussian got a colour gradient"
    assert torch.isfinite(means3d.grad).all() and torch.isfinite(opacity.grad).all()
    assert opacity.grad[0].abs().item() > 0, "no opacity gradient for the visible Gaussian"
    note = more(rasterizer, used, named) if more else ""
    cap = "".join(map(str, torch.cuda.get_device_capability()))
    print(f"pass: {module_name} forward+backward of one Gaussian matches the analytic facts "
          f"(outputs {', '.join(named)}; centre alpha {ratio.mean():.3f}{note}) on sm_{cap}")
