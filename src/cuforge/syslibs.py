"""System headers a recipe needs (sparsehash, CGAL, GMP, ...): found or named by package."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ToolchainError
from .recipes import Recipe, SystemHeader

SYSTEM_INCLUDE_DIRS = ("/usr/include", "/usr/local/include", "/opt/homebrew/include")


def include_dirs() -> list[Path]:
    extra = [p for var in ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH")
             for p in os.environ.get(var, "").split(os.pathsep) if p]
    multiarch = list(Path("/usr/include").glob("*-linux-gnu"))
    return [Path(p) for p in (*extra, *SYSTEM_INCLUDE_DIRS)] + multiarch


def missing_headers(recipe: Recipe) -> list[SystemHeader]:
    dirs = include_dirs()
    return [h for h in recipe.system_headers if not any((d / h.header).exists() for d in dirs)]


def require_headers(recipe: Recipe) -> None:
    """Raise ToolchainError naming the Debian/Ubuntu packages to install."""
    missing = missing_headers(recipe)
    if missing:
        names = ", ".join(f"<{h.header}>" for h in missing)
        pkgs = " ".join(sorted({h.debian for h in missing}))
        raise ToolchainError(f"{recipe.name} needs {names}, which is not installed",
                             hint=f"sudo apt-get install {pkgs}  (or put the headers on CPATH)")
