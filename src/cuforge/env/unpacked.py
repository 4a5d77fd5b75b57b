"""A PyPI wheel unpacked once under the state dir (``pip install --no-deps --target``), for what
a build or a check needs beside the combo env: CCCL's headers (env/cccl.py) and a
compute-sanitizer that can launch programs (verify --sanitize). Installed beside and renamed
into place, under a lock: never half there, installed once when builds run side by side.

>>> unpacked_dir(Path("/s"), "cccl", "nvidia-cuda-cccl==13.1.115")
PosixPath('/s/cccl/nvidia-cuda-cccl-13.1.115')
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from filelock import FileLock

from cuforge.core.errors import ToolchainError

COMPLETE = ".complete"


def unpacked_dir(state_dir: Path, group: str, spec: str) -> Path:
    """Where requirement ``spec`` of kind ``group`` (``cccl``, ``tools``) lives."""
    return state_dir / group / re.sub(r"[^A-Za-z0-9.]+", "-", spec).strip("-")


def is_unpacked(root: Path) -> bool:
    return (root / COMPLETE).is_file()


def ensure_unpacked(root: Path, spec: str, python: Path, *, what: str, hint: str) -> bool:
    """Install ``spec`` into ``root`` unless it is there; True when this call installed it.
    Uses the interpreter's pip (it reads pip's find-links and indexes: a carried wheel on a
    machine without network), uv where the interpreter has no pip. A failure is one
    ToolchainError naming ``what`` and the fix (``hint``)."""
    if is_unpacked(root):
        return False
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        if is_unpacked(root):
            return False
        _install(root, spec, python, what=what, hint=hint)
    return True


def _install(root: Path, spec: str, python: Path, *, what: str, hint: str) -> None:
    tmp = root.with_name(f".{root.name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    has_pip = subprocess.run([str(python), "-m", "pip", "--version"],
                             capture_output=True).returncode == 0
    uv = shutil.which("uv")
    argv = ([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
            if has_pip or not uv else [uv, "pip", "install", "--python", str(python)])
    proc = subprocess.run([*argv, "--no-deps", "--target", str(tmp), spec], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolchainError(f"could not install {what} {spec}: {tail}", hint=hint)
    (tmp / COMPLETE).write_text(spec + "\n")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
