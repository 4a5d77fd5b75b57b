"""Kernel smoke for Pointcept's pointops2: knnquery over two batches against brute force.
Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

from _knn_check import K, SIZES, assert_knn, batches  # noqa: E402
from pointops2.pointops import knnquery  # noqa: E402

xyz, offset = batches()
points = xyz.cuda().contiguous()
idx, dist = knnquery(K, points, points, offset.cuda(), offset.cuda())
assert_knn(xyz, offset, idx, dist)
print(f"pass: pointops2.knnquery matches brute-force {K}-NN in {len(SIZES)} batches")
