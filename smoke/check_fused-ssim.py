"""Kernel smoke for fused-ssim: value and gradient against the reference SSIM that 3DGS/MILo
use (11x11 Gaussian window, sigma 1.5, zero padding = "same"). Exit 0 / 77 / else fail."""

import sys

import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

from fused_ssim import fused_ssim  # noqa: E402


def reference_ssim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    g = torch.exp(-((torch.arange(11, dtype=a.dtype, device=a.device) - 5) ** 2) / (2 * 1.5**2))
    g = g / g.sum()
    win = (g[:, None] @ g[None, :]).expand(a.shape[1], 1, 11, 11).contiguous()
    conv = lambda x: F.conv2d(x, win, padding=5, groups=a.shape[1])  # noqa: E731
    mu1, mu2 = conv(a), conv(b)
    s11, s22, s12 = conv(a * a) - mu1**2, conv(b * b) - mu2**2, conv(a * b) - mu1 * mu2
    c1, c2 = 0.01**2, 0.03**2
    m = ((2 * mu1 * mu2 + c1) * (2 * s12 + c2)) / ((mu1**2 + mu2**2 + c1) * (s11 + s22 + c2))
    return m.mean()


gen = torch.Generator().manual_seed(0)
target = torch.rand(1, 3, 48, 64, generator=gen)
noisy = (target + 0.1 * torch.randn(target.shape, generator=gen)).clamp(0, 1)

img = noisy.cuda().requires_grad_(True)
value = fused_ssim(img, target.cuda())
value.backward()
ref_img = noisy.double().requires_grad_(True)
ref = reference_ssim(ref_img, target.double())
ref.backward()
torch.testing.assert_close(value.double().cpu(), ref.detach(), rtol=1e-4, atol=1e-5)
scale = ref_img.grad.abs().max().item()      # --use_fast_math: compare at 0.1 % of the largest
torch.testing.assert_close(img.grad.double().cpu(), ref_img.grad, rtol=1e-3, atol=1e-3 * scale)
print(f"pass: fused_ssim {value.item():.5f} and its gradient match the reference SSIM")
