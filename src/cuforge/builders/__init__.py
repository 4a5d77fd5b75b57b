"""Build kinds: one module each, same interface — ``steps(job) -> list[Step]`` that leave
exactly one wheel in ``job.out_dir``; ``kind_module`` maps a recipe's ``kind`` to its module."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..arches import ArchList
from ..compiler_cache import ActiveCache
from ..recipes import Recipe


@dataclass(frozen=True)
class BuildJob:
    """Everything one package build needs, resolved before anything runs."""

    recipe: Recipe
    python: Path
    src_dir: Path
    out_dir: Path          # staging: the wheel lands here, never directly in the wheelhouse
    build_dir: Path        # persistent, so an interrupted long build resumes
    archs: ArchList        # after the recipe's arch mapping
    env: tuple[tuple[str, str], ...]
    verbose: bool = False
    cmake_dir: Path | None = None   # native/cmake: shared CMake modules for our projects
    defines: tuple[tuple[str, str], ...] = ()   # CMake variables (e.g. TETRA_SOURCE_DIR)
    cache: ActiveCache | None = None   # the package's sccache server; None: no compiler cache
    slots: Path | None = None   # the compile-slot script (slots.py); None: not side by side

    def launchers(self) -> list[str]:
        """What goes in front of each compiler, outermost first: a slot, then the cache."""
        return [str(p) for p in (self.slots, self.cache.sccache if self.cache else None) if p]

    def launcher_dir(self) -> Path | None:
        """Where a kind may write launcher scripts (the setuptools kind's CXX)."""
        if self.cache is not None:
            return self.cache.launchers
        return self.slots.parent / "launchers" if self.slots else None


def kind_module(kind: str) -> ModuleType:
    """A kind's module (each of recipes.BUILD_KINDS is one here), imported when first used:
    ``python -m cuforge.builders.pep517`` imports this package, and an eager import of the kinds
    (which import pep517) would load that module twice (runpy's RuntimeWarning in every
    build log)."""
    return importlib.import_module(f"{__name__}.{kind}")


def steps_for(job: BuildJob):
    return kind_module(job.recipe.kind).steps(job)
