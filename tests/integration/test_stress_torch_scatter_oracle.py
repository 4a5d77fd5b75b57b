"""smoke/stress_torch-scatter.py's oracle, on the CPU with torch, with stand-ins for
torch_scatter built from torch's own ops: a correct one passes (also when its sums add in
another order, as atomics do), and each plausible wrong one fails the reduce it breaks.

The first GPU run of the stress (H100, session 27) ended in a device-side assert: the hot calls
drew indices 0-3 while ``groups`` could be 1-3. ``random_case`` is held to indices < groups
here, on the very draws that broke it."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import torch_python

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(torch_python() is None, reason="needs CUFORGE_TEST_TORCH_PYTHON")

CHECKS = textwrap.dedent("""
    import runpy, types, torch
    lib = runpy.run_path("smoke/stress_torch-scatter.py", run_name="oracle")
    random_case, check = lib["random_case"], lib["check"]

    def stand_in(add=None, include_self=False, shift=0):
        def scatter(src, index, dim, dim_size, reduce):
            out = torch.zeros(dim_size, src.shape[1], dtype=src.dtype)
            if reduce in ("sum", "mean"):
                total = (add or (lambda o, i, s: o.index_add_(0, i, s)))(out, index, src)
                if reduce == "sum":
                    return total
                counts = torch.bincount(index, minlength=dim_size).clamp(min=1)
                return total / counts[:, None]
            how = {"max": "amax", "min": "amin"}[reduce]
            return out.scatter_reduce(0, index[:, None].expand_as(src), src, how,
                                      include_self=include_self)
        def segment_csr(src, indptr, reduce):
            lengths = (indptr[1:] - indptr[:-1]).clamp(min=0)
            ids = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
            ids = (ids + shift).clamp(max=len(lengths) - 1)
            return torch.zeros(len(lengths), src.shape[1]).index_add_(0, ids, src)
        return types.SimpleNamespace(scatter=scatter, segment_csr=segment_csr)

    def backwards(out, index, src):    # another order of the same float32 additions
        flip = torch.arange(len(index) - 1, -1, -1)
        for i in range(0, len(index), 997):
            part = flip[i:i + 997]
            out.index_add_(0, index[part], src[part])
        return out

    def last_wins(out, index, src):    # colliding writes lost: no atomic add
        return out.index_put_((index,), src)

    def one_lost(out, index, src):     # one row's atomic dropped
        return out.index_add_(0, index[1:], src[1:])

    # the draws that broke the first GPU run: hot calls with groups of 1-3
    small = random_case.__globals__
    small["MAX_ROWS"], small["MAX_GROUPS"] = 1_000, 4
    gen, hot_small = torch.Generator().manual_seed(0), 0
    for i in range(300):
        case = random_case(i, gen, "cpu")
        assert case["hot"] == (i % 3 == 0)
        assert 0 <= int(case["index"].min()) and int(case["index"].max()) < case["groups"], i
        hot_small += case["hot"] and case["groups"] < 4
    assert hot_small > 50, hot_small

    gen = torch.Generator().manual_seed(1)
    cases = []
    for groups, hot in ((3, True), (2_000, False), (1, True), (40, False)):
        n = 20_000
        index = torch.randint(0, min(4, groups) if hot else groups, (n,), generator=gen)
        cases.append((index, torch.randn(n, 8, generator=gen), groups))
    for index, src, groups in cases:
        assert check(stand_in(), index, src, groups) == []
        assert check(stand_in(add=backwards), index, src, groups) == []
    index, src, groups = cases[1]
    assert check(stand_in(add=last_wins), index, src, groups) == ["sum", "mean"]
    assert check(stand_in(add=one_lost), index, src, groups) == ["sum", "mean"]
    assert check(stand_in(include_self=True), index, src, groups) == ["max", "min"]
    assert check(stand_in(shift=1), index, src, groups) == ["segment_csr"]
    print("ok")
    """)


def test_the_oracle_passes_torch_and_fails_each_wrong_reduce():
    proc = subprocess.run([str(torch_python()), "-c", CHECKS], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
