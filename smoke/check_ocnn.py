"""Kernel smoke for ocnn: octree convolution on the GPU, Triton's implicit GEMM against the
explicit column GEMM with the same weights. ocnn is pure Python, so this checks the stack
under it (torch's CUDA build and Triton compiling for this GPU), not a wheel of ours.
Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

import ocnn  # noqa: E402

DEPTH, CHANNELS_IN, CHANNELS_OUT = 6, 8, 16

gen = torch.Generator().manual_seed(0)
xyz = torch.rand(4000, 3, generator=gen) * 1.8 - 0.9   # inside [-1, 1] with a margin
points = ocnn.octree.Points(xyz.cuda(), features=torch.ones(4000, 1, device="cuda"))
octree = ocnn.octree.Octree(DEPTH, full_depth=2, device="cuda")
octree.build_octree(points)
octree.construct_all_neigh()

nodes = int(octree.nnum_nempty[DEPTH])
data = torch.randn(nodes, CHANNELS_IN, generator=gen).cuda()

triton_conv = ocnn.nn.OctreeConv(CHANNELS_IN, CHANNELS_OUT, [3, 3, 3], nempty=True, method="triton").cuda()
assert triton_conv.method == "triton", f"ocnn fell back to {triton_conv.method!r} on this GPU"
explicit_conv = ocnn.nn.OctreeConv(CHANNELS_IN, CHANNELS_OUT, [3, 3, 3], nempty=True,
                                   method="explicit_gemm").cuda()
explicit_conv.weights.data.copy_(triton_conv.weights.data)

got = triton_conv(data, octree, DEPTH)
want = explicit_conv(data, octree, DEPTH)
assert got.shape == (nodes, CHANNELS_OUT), f"output shape {tuple(got.shape)}"
error = (got - want).abs().max().item()
scale = want.abs().max().item()
# Triton's GEMM may use TF32: compare relative to the output's scale
assert error <= 1e-2 * scale, f"triton and explicit GEMM differ by {error:.3g} (scale {scale:.3g})"

got.square().sum().backward()
assert torch.isfinite(triton_conv.weights.grad).all(), "weight gradient is not finite"
print(f"pass: ocnn OctreeConv triton == explicit GEMM on {nodes} octree nodes at depth {DEPTH} "
      f"(max error {error:.2g}) on {torch.cuda.get_device_name()}")
