"""Kernel smoke for swin3d: its knn_cuda extension against brute force. `import Swin3D` pulls
in MinkowskiEngine, so the extension file is loaded directly, without the package's
__init__. Exit 0 = pass, 77 = skipped, else fail."""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

spec = importlib.util.find_spec("Swin3D")        # locates the package without importing it
if spec is None or not spec.submodule_search_locations:
    sys.exit("fail: Swin3D is not installed")
sofiles = sorted(Path(next(iter(spec.submodule_search_locations))).glob("sparse_dl/knn_cuda*.so"))
if not sofiles:
    sys.exit("fail: Swin3D/sparse_dl/knn_cuda*.so is missing from the wheel")
loader = importlib.machinery.ExtensionFileLoader("Swin3D.sparse_dl.knn_cuda", str(sofiles[0]))
knn_cuda = importlib.util.module_from_spec(
    importlib.util.spec_from_loader(loader.name, loader))
loader.exec_module(knn_cuda)

K = 6
gen = torch.Generator().manual_seed(0)
xyz = torch.rand(800, 3, generator=gen)
offset = torch.tensor([len(xyz)], dtype=torch.int32).cuda()
idx = torch.zeros(len(xyz), K, dtype=torch.int32, device="cuda")
dist2 = torch.full((len(xyz), K), 1e10, device="cuda")
points = xyz.cuda().contiguous()
knn_cuda.knn_cuda(K, points, points, offset, offset, idx, dist2)
want = torch.cdist(xyz.double(), xyz.double()).topk(K, largest=False).values
torch.testing.assert_close(dist2.cpu().sqrt().sort(1).values.double(), want, rtol=1e-4, atol=1e-5)
print(f"pass: Swin3D knn_cuda matches brute-force {K}-NN")
