"""Kernel smoke for Pointcept's pointops: knn_query over two batches against brute force.
Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

from _knn_check import K, SIZES, assert_knn, batches  # noqa: E402
from pointops import knn_query  # noqa: E402

xyz, offset = batches()
idx, dist = knn_query(K, xyz.cuda().contiguous(), offset.cuda())
assert_knn(xyz, offset, idx, dist)
print(f"pass: pointops.knn_query matches brute-force {K}-NN in {len(SIZES)} batches")
