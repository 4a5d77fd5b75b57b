"""Check 3 on real nvcc output: kernels compiled for different arch lists; the fatbin parser
must list exactly what cuobjdump lists, and coverage must pass, warn or fail accordingly."""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "verify"))
import verify_builders as vb  # noqa: E402

from cuforge.config.arches import Arch, parse_arch_list  # noqa: E402
from cuforge.verify.fatbin import check_fatbin, read_fatbin, runs_on  # noqa: E402

pytestmark = pytest.mark.skipif(not vb.have("nvcc"), reason="needs nvcc (CUDA 13)")

SM90 = ("-gencode", "arch=compute_90,code=sm_90")
BLACKWELL = ("-gencode", "arch=compute_120,code=sm_120",
             "-gencode", "arch=compute_121,code=[sm_121,compute_121]")


@pytest.fixture(scope="module")
def cuda_libs(tmp_path_factory) -> dict[str, Path]:
    """sm90 / blackwell / default (no arch flags: sm_75 + compute_75) / mixed (two .cu files,
    one with sm_90, one with nvcc's default) / compressed (sm_90 + PTX, -compress-all)."""
    out = tmp_path_factory.mktemp("cuda")

    def mixed() -> Path:
        a = vb.nvcc_object("kernel.cu", out / "kernel90.o", *SM90)
        b = vb.nvcc_object("scale.cu", out / "scale_default.o")
        return vb.nvcc_shared([str(a), str(b)], out / "mixed.so", *SM90)

    jobs = {
        "sm90": lambda: vb.nvcc_shared(["kernel.cu"], out / "sm90.so", *SM90),
        "blackwell": lambda: vb.nvcc_shared(["kernel.cu"], out / "blackwell.so", *BLACKWELL),
        "default": lambda: vb.nvcc_shared(["kernel.cu"], out / "default.so"),
        "mixed": mixed,
        "compressed": lambda: vb.nvcc_shared(
            ["kernel.cu"], out / "compressed.so", "-gencode", "arch=compute_90,code=[sm_90,compute_90]",
            "-Xfatbin", "-compress-all"),
        "cpu": lambda: vb.gxx_shared(["helper.cpp"], out / "cpu.so"),
        "no_kernels": lambda: vb.nvcc_shared(["host_only.cu"], out / "no_kernels.so",
                                             "-gencode", "arch=compute_120,code=sm_120"),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def labels(so: Path) -> tuple[list[str], list[str]]:
    """(SASS, PTX) labels over all containers, with repeats, as cuobjdump counts them."""
    containers = read_fatbin(so) or []
    sass = sorted(e.label for c in containers for e in c.entries if e.kind == "sass")
    ptx = sorted(e.label for c in containers for e in c.entries if e.kind == "ptx")
    return sass, ptx


def test_parser_lists_exactly_the_compiled_arches(cuda_libs):
    assert labels(cuda_libs["sm90"]) == (["sm_90", "sm_90"], [])  # kernel + device-link stub
    assert labels(cuda_libs["blackwell"]) == (["sm_120", "sm_120", "sm_121", "sm_121"], ["compute_121"])
    assert labels(cuda_libs["default"]) == (["sm_75", "sm_75"], ["compute_75"])
    assert read_fatbin(cuda_libs["cpu"]) is None


def test_kernel_groups_and_names(cuda_libs):
    groups = [c for c in read_fatbin(cuda_libs["mixed"]) if not c.is_link_stub]
    assert [c.kernels for c in groups] == [("_Z7add_onePfi",), ("_Z5scalePffi",)]
    assert [c.sass for c in groups] == [(Arch(9, 0),), (Arch(7, 5),)]
    assert [c.ptx for c in groups] == [(), (Arch(7, 5),)]


def test_compressed_entries_are_listed_without_kernel_names(cuda_libs):
    (group,) = [c for c in read_fatbin(cuda_libs["compressed"]) if c.ptx]
    assert all(e.compressed for e in group.entries)
    assert group.kernels is None
    assert group.sass == (Arch(9, 0),) and group.ptx == (Arch(9, 0),)


@pytest.mark.skipif(vb.cuobjdump() is None, reason="no cuobjdump (install nvidia-cuda-cuobjdump)")
@pytest.mark.parametrize("name", ["sm90", "blackwell", "default", "mixed", "compressed"])
def test_parser_agrees_with_cuobjdump(cuda_libs, name):
    so = cuda_libs[name]
    proc = subprocess.run([str(vb.cuobjdump()), "--list-elf", "--list-ptx", str(so)],
                          capture_output=True, text=True)
    # lines like "ELF file    1: sm90.1.sm_90.cubin" / "PTX file    1: blackwell.1.sm_121.ptx"
    elf = sorted(m[1] for m in re.finditer(r"^ELF file\s+\d+: .*\.(sm_\w+)\.cubin$", proc.stdout, re.M))
    ptx = sorted("compute_" + m[1] for m in re.finditer(r"^PTX file\s+\d+: .*\.sm_(\w+)\.ptx$", proc.stdout, re.M))
    assert labels(so) == (elf, ptx), proc.stdout


def test_coverage_native_sass_passes(cuda_libs):
    result = check_fatbin(cuda_libs["blackwell"], parse_arch_list("12.0;12.1+PTX"))
    assert result.status == "pass", result.detail
    assert result.summary.startswith("SASS sm_120 sm_121; PTX compute_121; 1 kernel group")


def test_coverage_missing_arch_fails(cuda_libs):
    result = check_fatbin(cuda_libs["sm90"], parse_arch_list("12.0"))
    assert result.status == "fail"
    assert result.summary == "12.0: group #2 (add_one(float*, int)): no SASS and no PTX that runs there"


def test_coverage_missing_ptx_fails(cuda_libs):
    result = check_fatbin(cuda_libs["sm90"], parse_arch_list("9.0+PTX"))
    assert result.status == "fail"
    assert result.summary == "9.0: group #2 (add_one(float*, int)): no compute_90 PTX (9.0+PTX requested)"


def test_coverage_ptx_only_is_a_warning_naming_the_jit(cuda_libs):
    # the silent arch trap: 12.0 requested, nvcc's default sm_75 + compute_75 built
    result = check_fatbin(cuda_libs["default"], parse_arch_list("12.0"))
    assert result.status == "warn"
    assert "runs by PTX JIT from compute_75" in result.summary
    assert "extra arches not requested: sm_75 compute_75 (sm_75 is nvcc's default arch" in result.detail


def test_coverage_per_kernel_group_in_a_mixed_library(cuda_libs):
    # like cumm/spconv: most kernels for the requested arch, some groups with nvcc's default
    result = check_fatbin(cuda_libs["mixed"], parse_arch_list("9.0"))
    assert result.status == "warn"
    assert result.summary == ("9.0: group #3 (scale(float*, float, int)): runs by PTX JIT from "
                              "compute_75 at first load (slow first start, different code path)")
    assert "group #2" not in result.detail  # add_one has native sm_90


def test_runs_on_a_real_blackwell_group(cuda_libs):
    (group,) = [c for c in read_fatbin(cuda_libs["blackwell"]) if not c.is_link_stub]
    assert runs_on(group, Arch(12, 1)) == ("native", Arch(12, 1))
    assert runs_on(group, Arch(12, 3)) == ("compatible", Arch(12, 1))
    assert runs_on(group, Arch(13, 0)) == ("ptx", Arch(12, 1))
    assert runs_on(group, Arch(10, 0)) is None  # compute_121 PTX does not run on older GPUs


def test_no_device_code_passes(cuda_libs):
    result = check_fatbin(cuda_libs["cpu"], parse_arch_list("12.0"))
    assert (result.status, result.detail) == ("pass", "no device code (no .nv_fatbin section)")


def test_a_fatbin_without_kernels_says_there_was_nothing_to_check(cuda_libs):
    """cumm's core_cc: a .nv_fatbin whose only containers are device-link stubs."""
    assert read_fatbin(cuda_libs["no_kernels"])        # the section is there
    result = check_fatbin(cuda_libs["no_kernels"], parse_arch_list("12.0;12.1+PTX"))
    assert result.status == "skipped", result.detail
    assert result.summary.startswith("skipped: nothing to check: ")
    assert "0 kernel groups" in result.summary and "native SASS" not in result.detail
