"""Each linux-aarch64 combo's torch + CUDA toolkit resolves for aarch64 (DGX Spark) with uv,
from this x86_64 machine, installing nothing. Needs the combo's index: skips when unreachable."""

import urllib.request
from dataclasses import replace

import pytest

from cuforge.config.combos import load_combos
from cuforge.core.project import find_project
from cuforge.env.resolve import resolve

AARCH64 = [(c, t) for c in load_combos(find_project()) if c.platform == "linux-aarch64"
           for t in c.torch_versions]


def _reachable(index: str) -> str | None:
    url = index.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(url, timeout=10):
            return None
    except OSError as err:
        return f"{url} is unreachable from here ({err})"


@pytest.mark.parametrize("combo,torch", AARCH64, ids=[f"{c.id}-torch{t}" for c, t in AARCH64])
def test_aarch64_combo_resolves_for_its_platform(combo, torch):
    why = _reachable(combo.torch_index or "https://pypi.org/simple")
    if why:
        pytest.skip(why)
    found = resolve(replace(combo, torch=torch))
    assert found.platform == "linux-aarch64"
    assert found.pins["torch"].split("+")[0] == torch
    assert found.cuda_torch   # a CUDA build, not the CPU wheel some versions have for aarch64
    cuda = f"{combo.accel.cuda.major}.{combo.accel.cuda.minor}."
    assert found.pins["nvidia-cuda-nvcc"].startswith(cuda)
    assert found.pins["nvidia-cuda-runtime"].startswith(cuda)


def test_a_cpu_only_torch_for_aarch64_is_refused():
    """PyPI's torch 2.9.1 for aarch64 is a CPU build: the check must say so, not pass."""
    combo = next(c for c, _ in AARCH64 if not c.torch_index)
    if why := _reachable("https://pypi.org/simple"):
        pytest.skip(why)
    from cuforge.core.errors import ToolchainError
    with pytest.raises(ToolchainError, match="is a CPU build"):
        resolve(replace(combo, torch="2.9.1"))
