"""Where cuforge finds the programs it runs besides its own compilers: uv, and a Python of a
given version (the base of a combo's venv, ``cuforge.env.target`` decides which)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

from cuforge.core.errors import ToolchainError


def which(interpreter: str) -> str:
    """A combo's ``interpreter`` (``python3`` or a path) as a path."""
    return shutil.which(interpreter) or interpreter


def native_python(interpreter: str, version: str) -> str:
    """The Python a native combo's venv is made from: its ``interpreter``, else ``version``
    found on this machine (raises ToolchainError when there is none)."""
    return which(interpreter) if interpreter else str(find_python(version))


def find_uv() -> str:
    try:
        from uv import find_uv_bin
        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    if found := shutil.which("uv"):
        return found
    raise ToolchainError("uv is not installed", hint="pip install uv (or `pip install -e .`)")


def find_python(version: str) -> Path:
    """Python ``version`` from PATH, pyenv, or uv's managed Pythons, in that order."""
    found = shutil.which(f"python{version}")
    if found and "/shims/" not in found:   # pyenv shims fail for versions not selected
        return Path(found)
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for candidate in sorted(glob.glob(str(pyenv_root / "versions" / f"{version}.*" / "bin" /
                                          f"python{version}")), reverse=True):
        return Path(candidate)
    try:
        out = subprocess.run([find_uv(), "python", "find", version], capture_output=True,
                             text=True)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    except ToolchainError:
        pass
    raise ToolchainError(f"Python {version} not found (not on PATH as python{version}, not in "
                         f"pyenv, not managed by uv)",
                         hint=f"install it: `uv python install {version}` or "
                         f"`pyenv install {version}`")
