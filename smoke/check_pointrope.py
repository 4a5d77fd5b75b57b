"""Kernel smoke for Pointcept's pointrope: the in-place 3-D rotary embedding on the GPU
against a torch re-implementation of its CPU loop. Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

from pointrope import pointrope  # noqa: E402  (the extension module itself)

B, N, H, D = 2, 50, 3, 4                          # tokens carry 6 * D values per head
BASE, FWD = 100.0, 1.0
gen = torch.Generator().manual_seed(0)
tokens = torch.randn(B, N, H, 6 * D, generator=gen)
positions = torch.randint(0, 64, (B, N, 3), generator=gen)

want = tokens.clone()
for axis in range(3):                              # x, y, z: each rotates its own 2*D slice
    u = tokens[..., axis * 2 * D: axis * 2 * D + D]
    v = tokens[..., axis * 2 * D + D: (axis + 1) * 2 * D]
    freq = FWD * positions[..., axis, None, None].float() / BASE ** (torch.arange(D) / D)
    want[..., axis * 2 * D: axis * 2 * D + D] = u * freq.cos() - v * freq.sin()
    want[..., axis * 2 * D + D: (axis + 1) * 2 * D] = v * freq.cos() + u * freq.sin()

got = tokens.cuda()
pointrope(got, positions.cuda(), BASE, FWD)       # rotates in place
torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
print("pass: pointrope on the GPU matches the reference rotation")
