"""Recipes' ``[upstream_tests]``: each package's own test suite run on its wheel, by
``cuforge verify --upstream-tests`` and as a build's last stage (``build --upstream-tests``).
Also how a wheel finds its recipe and the wheels it imports with (spconv needs cumm)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from cuforge.config.combos import Combo
from cuforge.core.project import Project
from cuforge.env.venv import ComboEnv
from cuforge.publish.wheelhouse import Wheelhouse


class UpstreamStage:
    """Runs recipes' ``[upstream_tests]`` for wheels (``verify --upstream-tests``, and a
    build's last stage): fetches each suite's tree once, asks for a GPU once."""

    def __init__(self, project: Project, python: Path, combo: Combo,
                 tests_src: dict[str, Path], source_overrides: dict[str, Path] | None = None,
                 run_env: tuple[tuple[str, str], ...] = ()):
        self.project, self.python, self.combo = project, Path(python), combo
        self.env = dict(run_env)   # what ``python`` needs to run (emulation's variables)
        self.tests_src = tests_src                  # --tests-src NAME=DIR: the suite's tree
        self.source_overrides = source_overrides or {}   # build --src: the package's tree
        self._gpu: bool | None = None

    def gpu_visible(self) -> bool:
        if self._gpu is None:
            from cuforge.verify.smoke import Device, probe_device
            self._gpu = isinstance(probe_device(self.python, env=self.env), Device)
        return self._gpu

    def tree(self, recipe) -> Path:
        """The directory the suite's ``path`` is relative to (raises SourceError)."""
        from cuforge.pipeline import sources
        spec = recipe.upstream_tests
        if recipe.name in self.tests_src:
            return self.tests_src[recipe.name]
        if spec.source is None and recipe.name in self.source_overrides:
            return self.source_overrides[recipe.name]
        source = spec.source or recipe.source
        base = self.project.state_dir / "upstream-tests"
        return sources.fetch(source, project_root=self.project.root,
                             cache_dir=self.project.state_dir / "cache",
                             dest=base / "trees" / recipe.name, stamp=source.describe())

    def run(self, wheel: Path, recipe, dependency_paths: list[Path], *, imported_ok: bool,
            tmp: Path):
        from cuforge.core.errors import CuforgeError
        from cuforge.verify import CheckResult
        from cuforge.verify.upstream import CHECK, run_upstream_tests
        from cuforge.verify.wheel import import_roots, top_level_modules, unpack
        spec = recipe.upstream_tests if recipe else None
        if spec is None:
            return CheckResult(CHECK, "skipped", "skipped: the recipe declares no "
                               "[upstream_tests] (docs/packages.md says why)")
        if not imported_ok:
            return CheckResult(CHECK, "skipped", "skipped: the wheel does not import")
        if spec.gpu and not self.gpu_visible():
            return CheckResult(CHECK, "skipped", "skipped: no GPU (the suite is declared "
                               f"gpu = true; torch.cuda.is_available() is False in {self.python})")
        try:
            tree = self.tree(recipe)
        except CuforgeError as err:
            return CheckResult(CHECK, "skipped", f"skipped: the suite's tree could not be "
                               f"fetched ({str(err).splitlines()[0]}); pass --tests-src "
                               f"{recipe.name}=DIR")
        root = tmp / f"suite-{wheel.name}"
        unpacked = unpack(wheel, root / "wheel")
        scratch = root / "run"
        scratch.mkdir(parents=True)
        site = self.project.state_dir / "upstream-tests" / self.combo.env_id / recipe.name
        return run_upstream_tests(self.python, spec, tree,
                                  paths=[*import_roots(unpacked), *dependency_paths],
                                  modules=top_level_modules(unpacked), requirements_dir=site,
                                  scratch=scratch, gpu_visible=self.gpu_visible() if spec.gpu
                                  else None, env=self.env)


def record_check(wheel: Path, result) -> None:
    """Append the wheel's manifest line again with ``result`` among its checks (the manifest
    is a journal: the newest line of a package is its state)."""
    from dataclasses import replace
    from datetime import datetime, timezone
    house = Wheelhouse(wheel.parent)
    recorded = [e for e in house.entries() if e.wheel == wheel.name]
    if not recorded:
        return
    entry = recorded[-1]
    house.publish(None, replace(entry, checks={**entry.checks, result.check: result},
                                time=datetime.now(timezone.utc).isoformat(timespec="seconds")))


def upstream_stage(project: Project, combo_env: ComboEnv, house_dir: Path, entries,
                   recipes: dict, source_overrides: dict[str, Path], console) -> None:
    """A build's last stage (``build --upstream-tests``): each built or prebuilt wheel's
    upstream suite, its verdict printed and recorded in the manifest."""
    stage = UpstreamStage(project, combo_env.python, combo_env.combo, {}, source_overrides,
                          combo_env.target.step_env())
    each_wheel(stage, lambda r: r.upstream_tests is not None, house_dir, entries, recipes,
               console)


def each_wheel(stage, wanted, house_dir: Path, entries, recipes: dict, console) -> list:
    """A late stage (upstream tests, stress) over a build's wheels: ``stage.run`` for each
    wheel whose recipe is ``wanted``, with the wheels it imports with; each verdict printed
    and recorded in the manifest. Returns the results."""
    from packaging.utils import canonicalize_name

    from cuforge.verify.report import verdict_line
    by_name = {canonicalize_name(n): r for n, r in recipes.items()}
    wheels = {e.package: house_dir / e.wheel for e in entries
              if e.status.has_wheel and e.wheel}
    by_package = {canonicalize_name(n): w for n, w in wheels.items()}
    results = []
    with tempfile.TemporaryDirectory(prefix="cuforge-stage-") as tmp:
        for name, wheel in wheels.items():
            recipe = recipes.get(name)
            if recipe is None or not wanted(recipe):
                continue
            deps = dependency_roots(recipe, by_name, by_package, Path(tmp))
            result = stage.run(wheel, recipe, deps, imported_ok=True, tmp=Path(tmp))
            record_check(wheel, result)
            results.append(result)
            console.print(verdict_line(name, [result], reason_width=200))
    return results


# cumm and spconv name their wheels after the CUDA version: cumm-cu130, spconv-cu126.
CUDA_SUFFIX = re.compile(r"-cu\d+$")


def recipe_for(package: str, recipes: dict):
    """The recipe of a wheel's (normalised) package name: ``torch-scatter``, or ``spconv-cu130``
    for the spconv recipe; None for wheels cuforge has no recipe for."""
    return recipes.get(package) or recipes.get(CUDA_SUFFIX.sub("", package))


def dependency_roots(recipe, recipes: dict, by_package: dict[str, Path], tmp: Path) -> list[Path]:
    """Import roots of the wheels that ``recipe`` depends on (transitively) among the wheels
    being verified, unpacked once each under ``tmp``: spconv needs cumm to import."""
    from packaging.utils import canonicalize_name

    from cuforge.verify.wheel import import_roots, unpack
    roots: list[Path] = []
    seen: set[str] = set()
    stack = [canonicalize_name(d) for d in recipe.depends]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        wheel = _wheel_named(name, by_package)
        if wheel is not None:
            dest = tmp / wheel.name
            if not dest.exists():
                unpack(wheel, dest)
            roots += import_roots(dest)
        if name in recipes:
            stack += [canonicalize_name(d) for d in recipes[name].depends]
    return roots


def _wheel_named(name: str, by_package: dict[str, Path]) -> Path | None:
    """The wheel of package ``name`` (``cumm`` finds cumm-cu130's wheel too)."""
    return by_package.get(name) or next(
        (w for pkg, w in by_package.items() if CUDA_SUFFIX.sub("", pkg) == name), None)
