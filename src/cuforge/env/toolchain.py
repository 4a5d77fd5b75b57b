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

from cuforge.config import platforms
from cuforge.config.arches import ArchList
from cuforge.core.errors import ToolchainError
from cuforge.env.hostcxx import HostCompiler
from cuforge.core.runner import capture

NVCC_MEM_PER_JOB = 2.5 * 2**30   # measured: nvcc needs ~2.5 GB per job on torch extensions


@dataclass(frozen=True)
class Toolkit:
    root: Path
    version: Version
    host_compiler: HostCompiler | None = None   # probed (cuforge.env.hostcxx.choose)
    # its headers' and libraries' dirs: an assembled root's are known before it exists (a dry
    # run shows them as the build will use them); a system toolkit's are the ones it has
    include_dirs: tuple[Path, ...] = ()
    lib_dirs: tuple[Path, ...] = ()
    cccl: str = ""   # the CCCL version its compiles see (cuforge.env.cccl): the manifest's

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    @property
    def cuobjdump(self) -> Path:
        return self.root / "bin" / "cuobjdump"


def nvcc_version(nvcc: Path, env: dict[str, str] | None = None) -> Version:
    """``nvcc --version``'s release; ``env``: what running it needs on top of ours (under
    emulation the env's nvcc is an aarch64 program, which QEMU runs only with the target's
    loader's root, the target's ``step_env``)."""
    out = capture([str(nvcc), "--version"], env=env, error=ToolchainError)
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
                             hint=f"install CUDA {expected} and point CUDA_HOME at it (CUDA "
                             "13 combos can also use toolkit = \"pypi\": the nvidia-cuda-* "
                             "wheels; CUDA 12 has no nvcc wheel)")
    root = toolkit_root_of(nvcc)
    libs = [d for d in (root / "lib64", root / "lib") if d.is_dir()]
    if len(libs) == 2 and libs[0].resolve() == libs[1].resolve():
        libs = libs[1:]
    return Toolkit(root, version, include_dirs=(root / "include",), lib_dirs=tuple(libs))


def _assembled(root: Path, version: Version) -> Toolkit:
    """The toolkit at an assembled root (lib64 is a link to lib there)."""
    return Toolkit(root, version, include_dirs=(root / "include",), lib_dirs=(root / "lib",))


# Bump when the assembled layout changes, so roots made by an older cuforge are redone.
_LAYOUT = "layout 2: merged dirs, hard-linked bin, unversioned dev names, targets/"


def assemble_pypi_toolkit(site_packages: Path, dest: Path, cuda_target: str = "", *,
                          env: dict[str, str] | None = None) -> Toolkit:
    """Merge ``site-packages/nvidia/*/{bin,include,lib,nvvm}`` into one root at ``dest``.

    CUDA 13 wheels share ``nvidia/cu13``; CUDA 12 wheels spread over ``nvidia/cuda_nvcc``,
    ``nvidia/cuda_runtime``, ... Tools expect one root with ``lib64`` and the unversioned
    development names that ``-lX`` looks for (``libnvrtc.so -> libnvrtc.so.13``: the wheels
    ship only sonames), so both layouts are merged into ``dest``. ``bin/`` files are hard
    links: nvcc finds its ``include/`` and ``nvvm/`` relative to its own real path. An existing
    root made from the same parts is left alone (another build may be compiling with it right
    now); a new one is made beside it and renamed into place. ``cuda_target`` names the
    ``targets/`` folder of the platform the wheels are built for (``sbsa-linux`` under
    emulation too; cuforge.config.platforms); default: this machine's.
    """
    cuda_target = cuda_target or platforms.build_platform().cuda_target
    nvidia = site_packages / "nvidia"
    parts = sorted(p for p in nvidia.glob("*") if p.is_dir()) if nvidia.is_dir() else []
    if not any((p / "bin" / "nvcc").exists() for p in parts):
        raise ToolchainError(f"no nvcc among the nvidia-cuda-* wheels in {site_packages}",
                             hint="the combo env is incomplete: rerun the build, or delete "
                             f"{dest.parent} to recreate it")
    stamp = "\n".join([_LAYOUT, *map(str, parts)])
    marker = dest / ".cuforge-toolkit"
    if not (marker.exists() and marker.read_text() == stamp):
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        for sub in ("bin", "include", "lib", "nvvm"):
            (tmp / sub).mkdir(parents=True)
            for part in parts:
                _merge_into(part / sub, tmp / sub, hardlink=sub == "bin")
        add_dev_names(tmp / "lib")
        (tmp / "lib64").symlink_to("lib")
        # The system toolkit's layout; cumm takes `which nvcc`/../targets/<triple>/include
        # with ../lib as the CUDA root (else it adds -L/usr/local/cuda/lib64).
        triple = tmp / "targets" / cuda_target
        triple.mkdir(parents=True)
        for sub in ("include", "lib"):
            (triple / sub).symlink_to(Path("../..") / sub)
        (tmp / ".cuforge-toolkit").write_text(stamp)
        old = dest.with_name(f".{dest.name}.old.{os.getpid()}")
        if dest.exists():
            dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    return _assembled(dest, nvcc_version(dest / "bin" / "nvcc", env))


def pypi_toolkit_at(dest: Path, expected: Version, *,
                    env: dict[str, str] | None = None) -> Toolkit:
    """The toolkit ``assemble_pypi_toolkit`` made (or will make) at ``dest``, read only: its
    nvcc's version once it is there, else the combo's (the env's wheels are pinned to it)."""
    nvcc = dest / "bin" / "nvcc"
    return _assembled(dest, nvcc_version(nvcc, env) if nvcc.exists() else expected)


_SONAME = re.compile(r"^(lib.+?)\.so\.(\d+)(\.\d+)*$")


def add_dev_names(lib: Path) -> list[str]:
    """Add ``libX.so -> libX.so.N`` for every versioned library in ``lib`` that lacks one.

    >>> import tempfile; d = Path(tempfile.mkdtemp())
    >>> for n in ("libnvrtc.so.13", "libnvrtc-builtins.so.13.0", "libcudart.so"): (d / n).touch()
    >>> add_dev_names(d)
    ['libnvrtc-builtins.so', 'libnvrtc.so']
    """
    added = []
    for path in sorted(lib.iterdir()):
        m = _SONAME.match(path.name)
        # `.alt.` variants (libnvrtc.alt.so.13) are alternatives, not what -lnvrtc means.
        if not m or ".alt" in m[1]:
            continue
        plain = lib / f"{m[1]}.so"
        if not plain.exists() and not plain.is_symlink():
            plain.symlink_to(path.name)
            added.append(plain.name)
    return added


def _merge_into(src: Path, dst: Path, *, hardlink: bool = False) -> None:
    """Link ``src``'s children into ``dst``; a directory two parts share becomes a real one
    holding both parts' children (CUDA 12 wheels each bring an ``include/``)."""
    if not src.is_dir() or src == dst:
        return
    for child in src.iterdir():
        target = dst / child.name
        if target.is_symlink() and target.is_dir() and child.is_dir():
            first = target.resolve()
            target.unlink()
            target.mkdir()
            _merge_into(first, target)
        if target.is_dir() and not target.is_symlink() and child.is_dir():
            _merge_into(child, target, hardlink=hardlink)
        elif not target.exists() and not target.is_symlink():
            _link(child.resolve(), target, hardlink=hardlink)


def _link(real: Path, target: Path, *, hardlink: bool) -> None:
    if hardlink and real.is_file():
        try:
            os.link(real, target)
            return
        except OSError:   # another filesystem: a copy keeps the tool's own path ours too
            shutil.copy2(real, target)
            return
    target.symlink_to(real)


def default_jobs() -> int:
    """min(cores, available memory / 2.5 GB), at least 1."""
    cores = os.cpu_count() or 1
    avail = mem_available()
    by_mem = int(avail // NVCC_MEM_PER_JOB) if avail else cores
    return max(1, min(cores, by_mem))


def jobs_within_memory(jobs: int, *, per_compile: float, arches: int, budget: int,
                       alone: bool, avail: float | None) -> tuple[int, int]:
    """(jobs, nvcc threads): the most of a package's ``jobs`` compilers that fit in ``avail``
    bytes when one device compilation of it peaks at ``per_compile`` bytes (a recipe's
    ``compile_memory_gb``), and how many arches each of them compiles at once (``-t``).

    Each nvcc compiles min(jobs, arches) arches at once (see build_environment). Beside other
    packages (``alone`` false) the rest of the ``budget`` may hold NVCC_MEM_PER_JOB each. At
    least one job, so the build always moves. When memory takes jobs away, each job left may
    compile more of its arches at once, within the cores the jobs had and what memory holds:
    on 2 cores, two arches that fit twice run as one job with ``-t 2``, not one at a time.

    >>> GB = 2**30
    >>> jobs_within_memory(16, per_compile=7 * GB, arches=1, budget=16, alone=True, avail=30 * GB)
    (4, 1)
    >>> jobs_within_memory(9, per_compile=7 * GB, arches=1, budget=9, alone=False, avail=23 * GB)
    (1, 1)
    >>> jobs_within_memory(2, per_compile=7 * GB, arches=1, budget=2, alone=True, avail=23 * GB)
    (2, 1)
    >>> jobs_within_memory(2, per_compile=7 * GB, arches=2, budget=2, alone=True, avail=23 * GB)
    (1, 2)
    >>> jobs_within_memory(16, per_compile=7 * GB, arches=2, budget=16, alone=True, avail=125 * GB)
    (8, 2)
    """
    if avail is None:
        return jobs, nvcc_threads(jobs, arches)

    def fits(k: int) -> int:   # device compilations that memory holds at once beside the others
        others = 0 if alone else (budget - k) * NVCC_MEM_PER_JOB
        return int((avail - others) // per_compile)

    k = next((k for k in range(jobs, 1, -1) if k * nvcc_threads(k, arches) <= fits(k)), 1)
    # with all jobs kept (jobs // k == 1) this is the default -t
    return k, max(nvcc_threads(k, arches), min(arches, jobs // k, fits(k) // k))


def nvcc_threads(jobs: int, arches: int) -> int:
    """nvcc's ``-t`` by default: each of ``jobs`` compilers takes up to ``jobs`` of its arches
    at once (the last files of a build then still use the cores)."""
    return max(1, min(jobs, arches))


def mem_available() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def build_environment(toolkit: Toolkit, archs: ArchList, *, jobs: int, cxx11_abi: bool,
                      extra_include: list[Path], extra_lib: list[Path], bin_dirs: list[Path],
                      threads: int | None = None) -> dict[str, str]:
    """The variables every package build gets, on top of the user's environment."""
    path = os.pathsep.join([*map(str, bin_dirs), str(toolkit.root / "bin"),
                            os.environ.get("PATH", "")])
    include = [*toolkit.include_dirs, *extra_include]
    return {
        "CUDA_HOME": str(toolkit.root),
        "CUDA_PATH": str(toolkit.root),
        "CUDACXX": str(toolkit.nvcc),
        "PATH": path,
        # cuBLAS/cuSPARSE/cuRAND headers that ATen/cuda includes live in torch's nvidia wheels.
        "CPATH": _join_paths(include, os.environ.get("CPATH")),
        "LIBRARY_PATH": _join_paths([*toolkit.lib_dirs, *extra_lib],
                                    os.environ.get("LIBRARY_PATH")),
        # A package's setup may import one built before it (spconv's imports cumm, whose
        # core_cc needs libnvrtc.so.N): make the toolkit's and the venv's CUDA libraries
        # loadable without torch preloading them. Verification says whether a user needs this.
        "LD_LIBRARY_PATH": _join_paths([*toolkit.lib_dirs, *extra_lib],
                                       os.environ.get("LD_LIBRARY_PATH")),
        "TORCH_CUDA_ARCH_LIST": archs.torch_env(),
        "CUDAARCHS": archs.cmake(),
        "MAX_JOBS": str(jobs),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs),
        # `-t` only: ccache does not hash NVCC_APPEND_FLAGS, so nothing output-changing goes here.
        "NVCC_APPEND_FLAGS": f"-t {threads or nvcc_threads(jobs, len(archs))}",
        "CUFORGE_TORCH_CXX11_ABI": "1" if cxx11_abi else "0",
        **(toolkit.host_compiler.environment() if toolkit.host_compiler else {}),
    }


def _join_paths(paths: list[Path], existing: str | None) -> str:
    """The dirs (which the env has, or will have once made: never filtered by what exists
    now, so a dry run shows the build's value) before the user's own."""
    items = list(map(str, paths))
    if existing:
        items.append(existing)
    return os.pathsep.join(items)
