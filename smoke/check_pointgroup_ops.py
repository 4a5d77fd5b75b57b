"""Kernel smoke for Pointcept's pointgroup_ops: ballquery_batch_p (GPU) and bfs_cluster (CPU)
against a Python reference (neighbour sets within the radius; connected components of
same-label neighbours with at least `threshold` points).
A CUDA launch error inside the extension calls exit(-1), so the kernels run in a child
process and its exit status is reported. Exit 0 = pass, 77 = skipped, else fail."""

import subprocess
import sys

import torch

RADIUS, THRESHOLD = 0.06, 5


def child() -> None:
    from pointgroup_ops import ballquery_batch_p, bfs_cluster

    gen = torch.Generator().manual_seed(0)
    # Three separated blobs (two labels) plus scattered noise: several clusters, some too small.
    centres = torch.tensor([[0.2, 0.2, 0.2], [0.8, 0.8, 0.8], [0.2, 0.8, 0.5]])
    blobs = [c + 0.04 * torch.randn(60, 3, generator=gen) for c in centres]
    xyz = torch.cat([*blobs, torch.rand(40, 3, generator=gen)]).float()
    labels = torch.cat([torch.zeros(60), torch.ones(60), torch.zeros(60),
                        torch.randint(0, 2, (40,), generator=gen).float()]).int()
    n = len(xyz)
    d = torch.cdist(xyz.double(), xyz.double())
    # The kernel compares float32 distances: a pair this close to the radius may fall either way
    # (with ~24k pairs some always do, whatever the seed), so it may differ there and nowhere else.
    ambiguous = (d - RADIUS).abs() < 1e-4

    idx, start_len = ballquery_batch_p(xyz.cuda(), torch.zeros(n, dtype=torch.int32).cuda(),
                                       torch.tensor([0, n], dtype=torch.int32).cuda(),
                                       RADIUS, 64)
    idx, start_len = idx.cpu(), start_len.cpu()
    neighbours = []
    for i in range(n):
        s, length = start_len[i].tolist()
        got = set(idx[s:s + length].tolist())
        want = set(torch.nonzero(d[i] < RADIUS).flatten().tolist())
        wrong = {j for j in got ^ want if not ambiguous[i, j]}
        assert not wrong, f"ball query of point {i}: {sorted(wrong)} differ"
        neighbours.append(got)

    cluster_idxs, offsets = bfs_cluster(labels, idx.int().contiguous(),
                                        start_len.int().contiguous(), THRESHOLD)
    got = {frozenset(cluster_idxs[a:b, 1].tolist())
           for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())}

    parent = list(range(n))                             # union-find reference
    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for i in range(n):                                  # on the graph the kernel returned
        for j in neighbours[i]:
            if labels[i] == labels[j]:
                parent[root(i)] = root(j)
    groups: dict[int, set[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), set()).add(i)
    want = {frozenset(g) for g in groups.values() if len(g) >= THRESHOLD}
    assert got == want, f"bfs_cluster: {len(got)} clusters, reference {len(want)}"
    print(f"pass: ballquery_batch_p and bfs_cluster ({len(got)} clusters) match the reference")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child()
        sys.exit(0)
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        sys.exit(77)
    proc = subprocess.run([sys.executable, __file__, "--child"])
    if proc.returncode != 0:
        print(f"fail: the pointgroup_ops child process exited with {proc.returncode} "
              "(-1/255 is the extension's own exit(-1) after a CUDA error)")
        sys.exit(1)
