"""Build kinds: one module each (like cibuildwheel's platform modules), same interface,
``KindModule``: the steps that leave exactly one wheel in ``job.out_dir``, the CMake variables
it takes from torch, and whether its configure step's compiler detection can be seeded.
``kind_module`` maps a recipe's ``BuildKind`` to its module; whether a kind compiles is the
enum's own fact (``BuildKind.compiles``), so the recipes never import this package."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from cuforge.config.arches import ArchList
from cuforge.pipeline.compiler_cache import ActiveCache
from cuforge.config.recipes import BuildKind, Recipe
from cuforge.pipeline.builders.reproducible import PathMaps

if TYPE_CHECKING:
    from cuforge.core.runner import Step
    from cuforge.env.torchinfo import TorchInfo


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
    # its paths mapped and its source's time (reproducible.py); None: left as they are
    paths: PathMaps | None = None

    def launchers(self, lang: str = "CXX") -> list[str]:
        """What goes in front of ``lang``'s compiler (CMake's names: C, CXX, CUDA), outermost
        first: a slot, the path maps, then the cache (which so hashes the maps' flags)."""
        mapped = self.paths.launcher(lang)[0] if self.paths else None
        return [str(p) for p in (self.slots, mapped, self.cache.sccache if self.cache else None)
                if p]

    def scripts(self) -> tuple[tuple[Path, str], ...]:
        """The launcher scripts its build writes just before it runs (the path maps')."""
        return self.paths.scripts() if self.paths else ()

    def launcher_dir(self) -> Path | None:
        """Where a kind may write launcher scripts (the setuptools kind's CXX)."""
        if self.cache is not None:
            return self.cache.launchers
        if self.slots:
            return self.slots.parent / "launchers"
        return self.paths.where if self.paths else None


class KindModule(Protocol):
    """What every module of this package that builds a kind provides."""

    SEEDS_DETECTION: bool   # its configure's compiler detection is kept and seeded (cmake_seed)

    def steps(self, job: BuildJob) -> list[Step]: ...

    def torch_defines(self, info: TorchInfo) -> tuple[tuple[str, str], ...]:
        """Variables the build takes from the probed torch instead of asking it again."""
        ...


def kind_module(kind: BuildKind) -> KindModule:
    """A kind's module, imported when first used: ``python -m cuforge.pipeline.builders.pep517``
    imports this package, and an eager import of the kinds (which import pep517) would load
    that module twice (runpy's RuntimeWarning in every build log)."""
    return cast(KindModule, importlib.import_module(f"{__name__}.{BuildKind(kind).value}"))
