"""The CCCL headers (CUB, Thrust, libcu++) a build compiles against, and the overlay that
replaces a toolkit's own where that one has a known fault.

CUDA 13.0 ships CCCL 3.0.1, whose merge sort has a programmatic-dependent-launch race
(data/cccl.toml). An accelerator's ``cccl_overlay`` (envs/accels.toml) names a newer
``nvidia-cuda-cccl`` wheel; its headers are unpacked once under ``.cuforge/cccl/`` and put first
on every build's include path (CPATH: searched before nvcc's ``-isystem <toolkit>/include/cccl``,
after the command line's ``-I``). nvcc stays the combo's, so the PTX stays loadable by that
CUDA's driver. The include path is part of each build's environment, hence of its key: a new
overlay rebuilds what it changes.

>>> version_text(300104)
'3.1.4'
>>> known_faults("3.0.1")[0].startswith("NVIDIA/cccl#5297")
True
>>> known_faults("3.1.4")
[]
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from cuforge import data
from cuforge.env.unpacked import ensure_unpacked, unpacked_dir

_CUB_VERSION = re.compile(r"^#\s*define\s+CUB_VERSION\s+(\d+)", re.M)


def version_text(number: int) -> str:
    """CUB_VERSION (MMMmmpp) as ``major.minor.patch``."""
    return f"{number // 100000}.{number // 100 % 1000}.{number % 100}"


def version_in(include_dirs: Sequence[Path]) -> str:
    """The CCCL version a compile with these include dirs (CPATH, in order) sees: the first
    ``cub/version.cuh`` in one of them, else in a toolkit's ``cccl/`` (CUDA 13's layout, which
    nvcc adds as ``-isystem``: after every CPATH dir); "" when none has one."""
    headers = [d / "cub" / "version.cuh" for d in include_dirs]
    headers += [d / "cccl" / "cub" / "version.cuh" for d in include_dirs]
    for header in headers:
        if header.is_file():
            found = _CUB_VERSION.search(header.read_text(errors="replace"))
            if found:
                return version_text(int(found[1]))
    return ""


def known_faults(version: str) -> list[str]:
    """``id: what`` of every fault in data/cccl.toml that CCCL ``version`` has."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        return []
    return [f"{row['id']}: {' '.join(row['what'].split())}" for row in data.table("cccl")["race"]
            if parsed in SpecifierSet(row["affected"])]


def overlay_spec(accel_spec: str) -> str:
    """The overlay to use: ``CUFORGE_CCCL_OVERLAY`` (a requirement, or ``off`` for the
    toolkit's own CCCL, e.g. to reproduce a fault) over the accel's ``cccl_overlay``.

    >>> os.environ.pop("CUFORGE_CCCL_OVERLAY", None) and None
    >>> overlay_spec("nvidia-cuda-cccl==13.1.115")
    'nvidia-cuda-cccl==13.1.115'
    """
    named = os.environ.get("CUFORGE_CCCL_OVERLAY")
    if named is None:
        return accel_spec
    return "" if named.strip().lower() in ("", "off", "none", "toolkit") else named.strip()


def overlay_dir(state_dir: Path, spec: str) -> Path:
    """Where the overlay for requirement ``spec`` (``nvidia-cuda-cccl==13.1.115``) lives."""
    return unpacked_dir(state_dir, "cccl", spec)


def overlay_include(root: Path) -> Path:
    """The include dir inside an unpacked ``nvidia-cuda-cccl`` wheel (``nvidia/cu13/include/
    cccl`` for CUDA 13; CUDA 12 wheels put ``cub/`` in ``nvidia/cuda_cccl/include``)."""
    for found in sorted(root.glob("nvidia/*/include/cccl")) + sorted(root.glob("nvidia/*/include")):
        if (found / "cub" / "version.cuh").is_file():
            return found
    return root / "nvidia" / "cu13" / "include" / "cccl"   # where it will be (dry run)


def ensure_overlay(state_dir: Path, spec: str, python: Path) -> Path:
    """The overlay's include dir, installing ``spec`` there first if needed (env/unpacked.py:
    once, never half there; a carried wheel works offline)."""
    root = overlay_dir(state_dir, spec)
    if ensure_unpacked(root, spec, python, what="the CCCL overlay",
                       hint="check the network or pip's find-links (a carried wheel), or set "
                       "`cccl_overlay = \"\"` for this accel in envs/accels.toml to build with "
                       "the toolkit's own CCCL"):
        from rich.text import Text

        from cuforge.core.console import make_console   # a note: -q leaves it out
        make_console(stderr=True).print(
            Text(f"note: CCCL overlay {spec} at {overlay_include(root)}"), soft_wrap=True)
    return overlay_include(root)
