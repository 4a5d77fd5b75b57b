"""``--ptx-jit`` on real nvcc output: the SASS a device would pick is hidden in a copy, so the
driver JIT-compiles the PTX; what has no PTX is left alone and said."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.config.arches import Arch  # noqa: E402
from cuforge.verify.fatbin import read_fatbin, runs_on  # noqa: E402
from cuforge.verify.ptxjit import hide_sass  # noqa: E402

pytestmark = pytest.mark.skipif(not vb.have("nvcc"), reason="needs nvcc (CUDA 13)")

WITH_PTX = ("-gencode", "arch=compute_90,code=[sm_90,compute_90]")
SASS_ONLY = ("-gencode", "arch=compute_90,code=sm_90")


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("jit")
    return {"with_ptx": vb.nvcc_shared(["kernel.cu"], out / "with_ptx.so", *WITH_PTX),
            "sass_only": vb.nvcc_shared(["kernel.cu"], out / "sass_only.so", *SASS_ONLY)}


def _copy(lib: Path, tmp: Path) -> Path:
    tree = tmp / "wheel" / "pkg"
    tree.mkdir(parents=True)
    shutil.copy2(lib, tree / lib.name)
    return tree / lib.name


def _kernel_group(so: Path):
    (group,) = [c for c in read_fatbin(so) if not c.is_link_stub]
    return group


def test_the_device_s_sass_is_hidden_and_its_ptx_runs(libs, tmp_path):
    so = _copy(libs["with_ptx"], tmp_path)
    assert runs_on(_kernel_group(so), Arch(9, 0)) == ("native", Arch(9, 0))

    hidden = hide_sass(tmp_path / "wheel", Arch(9, 0))

    assert (hidden.libraries, hidden.images, hidden.groups, hidden.without_ptx) == (1, 1, 1, ())
    group = _kernel_group(so)
    assert group.sass == (Arch(10, 0),) and group.ptx == (Arch(9, 0),)
    assert runs_on(group, Arch(9, 0)) == ("ptx", Arch(9, 0))
    assert so.stat().st_size == libs["with_ptx"].stat().st_size
    assert libs["with_ptx"].read_bytes() != so.read_bytes()   # the copy changed, not the build


def test_sass_without_ptx_is_left_alone_and_said(libs, tmp_path):
    so = _copy(libs["sass_only"], tmp_path)

    hidden = hide_sass(tmp_path / "wheel", Arch(9, 0))

    assert hidden.without_ptx == ("pkg/sass_only.so: 1 groups",) and hidden.images == 0
    assert so.read_bytes() == libs["sass_only"].read_bytes()


def test_other_majors_are_not_touched(libs, tmp_path):
    so = _copy(libs["with_ptx"], tmp_path)
    hidden = hide_sass(tmp_path / "wheel", Arch(12, 0))   # sm_90 SASS never runs there
    assert hidden.images == 0 and so.read_bytes() == libs["with_ptx"].read_bytes()


@pytest.mark.skipif(vb.cuobjdump() is None, reason="no cuobjdump (install nvidia-cuda-cuobjdump)")
def test_cuobjdump_reads_the_relabeled_image(libs, tmp_path):
    so = _copy(libs["with_ptx"], tmp_path)
    hide_sass(tmp_path / "wheel", Arch(9, 0))
    listed = subprocess.run([str(vb.cuobjdump()), "--list-elf", "--list-ptx", str(so)],
                            capture_output=True, text=True, check=True).stdout
    # cuobjdump names a cubin by its ELF header's arch: the kernel's image now reads sm_100
    # (nvcc's device-link stub keeps sm_90: it has no kernel to run either way); the PTX stays
    assert "with_ptx.2.sm_100.cubin" in listed and "with_ptx.1.sm_90.ptx" in listed
