"""smoke/stress_spconv.py's oracle for spconv's sorted subm masks, on the CPU with torch: what
spconv's sort returns (the masks sorted in place, ascending, mask_argsort the rows they came
from) passes, and a wrong answer fails. The first GPU run of the stress (H100, session 23)
read sorted masks as if they were in row order and failed every call: this holds the oracle
to what spconv does (spconv/csrc/sparse/all.py: thrust::sort_by_key on the mask tuples). The
second run (session 24) failed every k=5 call: the oracle compared the words as int32, while
spconv sorts them as uint32 (ops.py views pair_mask as tv.uint32); k=3's 27 bits never reach
bit 31, k=5's 125 do."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import torch_python

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(torch_python() is None, reason="needs CUFORGE_TEST_TORCH_PYTHON")

CHECKS = textwrap.dedent("""
    import runpy, torch
    lib = runpy.run_path("smoke/stress_spconv.py", run_name="oracle")
    check = lib["check_split"]
    g = torch.Generator().manual_seed(0)
    n, words = 500, 4                       # k=5: 125 offsets, 4 words, bit 31 set in some
    rows = torch.randint(0, 2**31, (n, words), generator=g, dtype=torch.int64)
    rows[::7, 0] = rows[3, 0]               # equal first words: the tuple's next word decides
    rows[::5, 1] |= 1 << 31                 # a sign bit, as int32 holds it
    masks = (rows & 0xFFFFFFFF).to(torch.int64)
    as_int32 = torch.where(masks >= 2**31, masks - 2**32, masks).to(torch.int32)
    def sorted_by(keys):                    # ascending tuples, with the rows they came from
        order = sorted(range(n), key=lambda i: tuple(keys[i].tolist()))
        return torch.tensor(order, dtype=torch.int32)
    # spconv's answer: the words as uint32 (in int32 storage), sorted ascending
    argsort = sorted_by(masks)
    in_rows, problems = check(as_int32[argsort.long()].reshape(-1), argsort, n, True)
    assert problems == [] and torch.equal(in_rows, masks), problems
    # a sort of the words as int32 (signed) is another order, and is seen
    signed = sorted_by(as_int32.to(torch.int64))
    _, problems = check(as_int32[signed.long()].reshape(-1), signed, n, True)
    assert problems == ["the masks are not in ascending order"], problems
    # no sort (SPCONV_DO_SORT=0): row order and the identity
    in_rows, problems = check(as_int32.reshape(-1), torch.arange(n, dtype=torch.int32), n, False)
    assert problems == [] and torch.equal(in_rows, masks), problems
    # wrong answers are seen
    shuffled = torch.randperm(n, generator=g).to(torch.int32)
    _, problems = check(as_int32[shuffled.long()].reshape(-1), shuffled, n, True)
    assert problems == ["the masks are not in ascending order"], problems
    _, problems = check(as_int32[argsort.long()].reshape(-1), torch.zeros(n, dtype=torch.int32), n, True)
    assert problems == ["mask_argsort is not a permutation"], problems
    print("ok")
    """)


def test_the_oracle_reads_sorted_masks_as_spconv_returns_them():
    proc = subprocess.run([str(torch_python()), "-c", CHECKS], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
