"""The CUDA toolkit a combo compiles with, and the environment every build gets.

Two sources: ``pypi`` assembles the ``nvidia-cuda-*`` wheels installed in the combo's venv into
one toolkit root (links only); ``system`` takes the nvcc found via ``CUDA_HOME`` or ``PATH``.
``nvcc`` on PATH may be a wrapper script outside the toolkit, so the root is asked from nvcc
itself (``nvcc --dryrun`` prints ``_HERE_``), never derived as the parent of ``which nvcc``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from .arches import ArchList
from .errors import ToolchainError
from .runner import capture

NVCC_MEM_PER_JOB = 2.5 * 2**30   # measured: nvcc needs ~2.5 GB per job on torch extensions


@dataclass(frozen=True)
class Toolkit:
    root: Path
    version: Version

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    @property
    def cuobjdump(self) -> Path:
        return self.root / "bin" / "cuobjdump"


def nvcc_version(nvcc: Path) -> Version:
    out = capture([str(nvcc), "--version"], error=ToolchainError)
    m = re.search(r"release (\d+\.\d+)", out)
    if not m:
        raise ToolchainError(f"cannot read the CUDA version from `{nvcc} --version`")
    return Version(m[1])


def toolkit_root_of(nvcc: Path) -> Path:
    """The directory holding ``include/cuda_runtime.h`` for this nvcc (which may be a wrapper)."""
    # --dryrun prints the driver's variables on stderr; the input file need not exist.
    proc = subprocess.run([str(nvcc), "--dryrun", "-v", "cuforge-probe.cu"], capture_output=True,
                          text=True)
    out = proc.stdout + proc.stderr
    here = re.search(r"^#\$ _HERE_=(.*)$", out, re.M)
    candidates = [Path(here[1]).parent] if here else []
    candidates.append(nvcc.resolve().parent.parent)
    for root in candidates:
        if (root / "include" / "cuda_runtime.h").is_file():
            return root.resolve()
    raise ToolchainError(f"found {nvcc}, but no include/cuda_runtime.h next to its toolkit "
                         f"(looked in {', '.join(map(str, candidates))})",
                         hint="set CUDA_HOME to the toolkit root")


def find_system_toolkit(expected: Version) -> Toolkit:
    """The system toolkit, which must be the combo's CUDA major.minor."""
    if home := os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        nvcc = Path(home) / "bin" / "nvcc"
    elif found := shutil.which("nvcc"):
        nvcc = Path(found)
    else:
        raise ToolchainError("no CUDA toolkit found: nvcc is not on PATH and CUDA_HOME is unset",
                             hint="use toolkit = \"pypi\" in the combo, or install CUDA "
                             f"{expected} and put its bin/ on PATH")
    version = nvcc_version(nvcc)
    if (version.major, version.minor) != (expected.major, expected.minor):
        raise ToolchainError(f"the system nvcc ({nvcc}) is CUDA {version}, but this combo needs "
                             f"CUDA {expected}",
                             hint="use toolkit = \"pypi\" (the nvidia-cuda-* wheels) or point "
                             "CUDA_HOME at a matching toolkit")
    return Toolkit(toolkit_root_of(nvcc), version)


def assemble_pypi_toolkit(site_packages: Path, dest: Path) -> Toolkit:
    """Merge ``site-packages/nvidia/*/{bin,include,lib,nvvm}`` into one root at ``dest``.

    CUDA 13 wheels share ``nvidia/cu13``; CUDA 12 wheels spread over ``nvidia/cuda_nvcc``,
    ``nvidia/cuda_runtime``, ... Tools expect one root with ``lib64`` and an unversioned
    ``libcudart.so``, so both layouts are linked into ``dest``. An existing root made from the
    same parts is left alone (another build may be compiling with it right now); a new one is
    made beside it and renamed into place.
    """
    nvidia = site_packages / "nvidia"
    parts = sorted(p for p in nvidia.glob("*") if p.is_dir()) if nvidia.is_dir() else []
    if not any((p / "bin" / "nvcc").exists() for p in parts):
        raise ToolchainError(f"no nvcc among the nvidia-cuda-* wheels in {site_packages}",
                             hint="the combo env is incomplete: rerun the build, or delete "
                             f"{dest.parent} to recreate it")
    stamp = "\n".join(str(p) for p in parts)
    marker = dest / ".cuforge-toolkit"
    if not (marker.exists() and marker.read_text() == stamp):
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        for sub in ("bin", "include", "lib", "nvvm"):
            (tmp / sub).mkdir(parents=True)
            for part in parts:
                _link_children(part / sub, tmp / sub)
        for lib in (tmp / "lib").glob("libcudart.so.*"):
            plain = tmp / "lib" / "libcudart.so"
            if not plain.exists():
                plain.symlink_to(lib.name)
        (tmp / "lib64").symlink_to("lib")
        (tmp / ".cuforge-toolkit").write_text(stamp)
        old = dest.with_name(f".{dest.name}.old.{os.getpid()}")
        if dest.exists():
            dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    return Toolkit(dest, nvcc_version(dest / "bin" / "nvcc"))


def _link_children(src: Path, dst: Path) -> None:
    if not src.is_dir() or src == dst:
        return
    for child in src.iterdir():
        target = dst / child.name
        if not target.exists() and not target.is_symlink():
            target.symlink_to(child.resolve())


def default_jobs() -> int:
    """min(cores, available memory / 2.5 GB), at least 1."""
    cores = os.cpu_count() or 1
    avail = _mem_available()
    by_mem = int(avail // NVCC_MEM_PER_JOB) if avail else cores
    return max(1, min(cores, by_mem))


def _mem_available() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def build_environment(toolkit: Toolkit, archs: ArchList, *, jobs: int, cxx11_abi: bool,
                      extra_include: list[Path], extra_lib: list[Path], bin_dirs: list[Path]
                      ) -> dict[str, str]:
    """The variables every package build gets, on top of the user's environment."""
    path = os.pathsep.join([*map(str, bin_dirs), str(toolkit.root / "bin"),
                            os.environ.get("PATH", "")])
    include = [toolkit.root / "include", *extra_include]
    nvcc_threads = max(1, min(jobs, len(archs)))
    return {
        "CUDA_HOME": str(toolkit.root),
        "CUDA_PATH": str(toolkit.root),
        "CUDACXX": str(toolkit.nvcc),
        "PATH": path,
        # cuBLAS/cuSPARSE/cuRAND headers that ATen/cuda includes live in torch's nvidia wheels.
        "CPATH": _join_paths(include, os.environ.get("CPATH")),
        "LIBRARY_PATH": _join_paths([toolkit.root / "lib", *extra_lib],
                                    os.environ.get("LIBRARY_PATH")),
        "TORCH_CUDA_ARCH_LIST": archs.torch(),
        "CUDAARCHS": archs.cmake(),
        "MAX_JOBS": str(jobs),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs),
        # `-t` only: ccache does not hash NVCC_APPEND_FLAGS, so nothing output-changing goes here.
        "NVCC_APPEND_FLAGS": f"-t {nvcc_threads}",
        "CUFORGE_TORCH_CXX11_ABI": "1" if cxx11_abi else "0",
    }


def _join_paths(paths: list[Path], existing: str | None) -> str:
    items = [str(p) for p in paths if p.is_dir()]
    if existing:
        items.append(existing)
    return os.pathsep.join(items)
