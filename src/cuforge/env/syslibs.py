"""System headers a recipe needs (sparsehash, CGAL, GMP, ...): found or named by package."""

from __future__ import annotations

import os
from pathlib import Path

from cuforge.core.errors import ToolchainError
from cuforge.config.recipes import Recipe, SystemHeader

SYSTEM_INCLUDE_DIRS = ("/usr/include", "/usr/local/include", "/opt/homebrew/include")


def include_dirs(sysroot: Path | None = None) -> list[Path]:
    """Where the compiler looks for system headers: CPATH & co., then the system dirs, which
    a cross compiler (``--sysroot``) takes from the target's root instead of this machine."""
    extra = [p for var in ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH")
             for p in os.environ.get(var, "").split(os.pathsep) if p]
    top = Path(sysroot) if sysroot else Path("/")
    system = [top / d.lstrip("/") for d in SYSTEM_INCLUDE_DIRS]
    multiarch = list((top / "usr/include").glob("*-linux-gnu"))
    return [Path(p) for p in extra] + system + multiarch


def missing_headers(recipe: Recipe, sysroot: Path | None = None) -> list[SystemHeader]:
    dirs = include_dirs(sysroot)
    return [h for h in recipe.system_headers if not any((d / h.header).exists() for d in dirs)]


def require_headers(recipe: Recipe, sysroot: Path | None = None) -> None:
    """Raise ToolchainError naming the Debian/Ubuntu packages to install (into the target's
    root under emulation: that is where the cross compiler looks)."""
    missing = missing_headers(recipe, sysroot)
    if missing:
        names = ", ".join(f"<{h.header}>" for h in missing)
        pkgs = " ".join(sorted({h.debian for h in missing}))
        if sysroot:
            raise ToolchainError(
                f"{recipe.name} needs {names}, which the emulation root {sysroot} lacks",
                hint=f"add {pkgs} to the root's packages in envs/emulation.toml, then run "
                     "`sudo cuforge emulation setup` again")
        raise ToolchainError(f"{recipe.name} needs {names}, which is not installed",
                             hint=f"sudo apt-get install {pkgs}  (or put the headers on CPATH)")
