"""Smoke for cumm: its tensorview moves data to the GPU and back intact. cumm's GEMM kernels
are exercised through spconv's smoke test. Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

import numpy as np  # noqa: E402
from cumm import tensorview as tv  # noqa: E402

data = np.arange(4096, dtype=np.float32).reshape(64, 64)
on_gpu = tv.from_numpy(data).cuda()
assert on_gpu.device == 0, on_gpu.device
back = on_gpu.cpu().numpy()
assert np.array_equal(back, data), "tensorview round trip changed the data"
print("pass: cumm.tensorview host -> device -> host round trip is exact")
