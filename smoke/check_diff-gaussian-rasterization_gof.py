"""Kernel smoke for diff-gaussian-rasterization_gof (Gaussian Opacity Fields, as vendored in MILo):
one Gaussian forward + backward against analytic facts (see _gaussian_rasterizer.py), forward's
outputs as its __init__.py returns them at MILo's pin, its extra image channels, and
GaussianRasterizer.integrate (opacity accumulated along the ray up to 3D points).
Exit 0 = pass, 77 = skipped (reason printed), else fail."""

import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the shared helper lives beside us
from _gaussian_rasterizer import DEPTH, OPACITY, SIZE, run  # noqa: E402

# forward returns (color, radii). color has 9 channels (rasterize_points.cu allocates
# OUTPUT_CHANNELS; the offsets are auxiliary.h's): RGB over the background, the accumulated
# normal (3), the depth where transmittance falls below 0.5, the accumulated alpha, and the
# distortion loss term.
OUTPUTS = (("color", (9, "H", "W")), ("radii", ("P",)))
NORMAL, DEPTH_CH, ALPHA_CH, DISTORTION_CH = slice(3, 6), 6, 7, 8


def gof_facts(rasterizer, args: dict, named: dict) -> str:
    color = named["color"].detach()
    c = SIZE // 2
    rgb_alpha = (color[:3, c, c] / torch.tensor((0.2, 0.6, 0.9), device=color.device)).mean()
    alpha = color[ALPHA_CH]
    torch.testing.assert_close(alpha[c, c], rgb_alpha, rtol=1e-3, atol=1e-5)
    # one Gaussian per ray: the normal channels hold a unit normal times alpha
    torch.testing.assert_close(color[NORMAL, c, c].norm(), alpha[c, c], rtol=1e-3, atol=1e-5)
    depth = color[DEPTH_CH, c, c].item()
    assert abs(depth - DEPTH) < 0.05 * DEPTH, f"centre depth {depth:.3f}, Gaussian at {DEPTH}"
    assert color[DISTORTION_CH].abs().max() < 1e-4, "distortion with a single Gaussian per ray"

    # integrate(points3D, ...) -> (color, alpha_integrated [N], color_integrated [N, 3], radii)
    points = torch.tensor([[0.0, 0.0, DEPTH / 3], [0.0, 0.0, DEPTH * 5 / 3]], device=color.device)
    with torch.no_grad():
        out = rasterizer.integrate(points, **{k: (v.detach() if torch.is_tensor(v) else v)
                                              for k, v in args.items()})
    assert isinstance(out, tuple) and len(out) == 4, f"integrate returned {len(out)} values, not 4"
    image, alpha_points, color_points, radii = out
    assert image.shape == (9, SIZE, SIZE) and radii.shape == (2,), (image.shape, radii.shape)
    assert alpha_points.shape == (2,) and color_points.shape == (2, 3), \
        (alpha_points.shape, color_points.shape)
    front, behind = alpha_points.tolist()
    assert front < 0.05, f"a point in front of the Gaussian has accumulated opacity {front:.3f}"
    assert abs(behind - OPACITY) < 0.05, f"a point behind it has {behind:.3f}, not ~{OPACITY}"
    return f"; depth {depth:.3f}; integrate: opacity {front:.3f} in front, {behind:.3f} behind"


run("diff_gaussian_rasterization_gof", OUTPUTS, gof_facts)
