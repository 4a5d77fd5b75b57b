"""``invoke verify PATH``: re-run every check on wheels (ours or anybody's) against a combo."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from . import emulation, venv, wheelmeta
from .combos import Combo
from .console import make_console
from .errors import ConfigError, VerifyError
from .pipeline import smoke_script, verify_context
from .project import Project
from .recipes import load_recipes
from .wheelhouse import Wheelhouse


def collect_wheels(paths: list[Path]) -> list[Path]:
    wheels: list[Path] = []
    for p in paths:
        if p.is_dir():
            wheels += sorted(p.glob("*.whl"))
        elif p.suffix == ".whl" and p.is_file():
            wheels.append(p)
        else:
            raise ConfigError(f"{p} is neither a wheel nor a directory of wheels")
    if not wheels:
        raise ConfigError(f"no wheels in {', '.join(map(str, paths))}")
    return wheels


def model_reports(project: Project, env, wheels: list[Path]) -> list:
    """Run each stack's miniature (``miniature`` in ``stacks/*.toml``: ptv3_tiny, milo_tiny)
    whose required packages are all among ``wheels``, with every wheel importable together
    (the model stage for wheels used without a checkout), reported like one package per
    model. A stack whose packages are not all there is listed as skipped, saying which."""
    from packaging.utils import canonicalize_name

    from .stacks import available_stacks, load_stack
    from .verify import CheckResult, WheelReport
    from .verify.smoke import check_smoke
    from .verify.wheel import import_roots, package_name, unpack
    have = {_CUDA_SUFFIX.sub("", package_name(w)) for w in wheels}
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        roots: list[Path] = []
        for i, wheel in enumerate(wheels):
            roots += import_roots(unpack(wheel, Path(tmp) / str(i)))
        for name in available_stacks(project):
            stack = load_stack(project, name)
            if not stack.miniature:
                continue
            script = project.root / stack.miniature
            lacking = [p for p in stack.packages if canonicalize_name(p) not in have]
            if lacking:
                result = CheckResult("smoke", "skipped", f"skipped: the {name} stack's "
                                     f"{', '.join(lacking)} not among the wheels")
            else:
                result = check_smoke(env.python, script, roots)
            out.append(WheelReport(script, f"model:{script.stem}",
                                   [CheckResult("smoke", result.status, result.detail)]))
    return out


class UpstreamStage:
    """Runs recipes' ``[upstream_tests]`` for wheels (``verify --upstream-tests``, and a
    build's last stage): fetches each suite's tree once, asks for a GPU once."""

    def __init__(self, project: Project, python: Path, combo: Combo,
                 tests_src: dict[str, Path], source_overrides: dict[str, Path] | None = None):
        self.project, self.python, self.combo = project, Path(python), combo
        self.tests_src = tests_src                  # --tests-src NAME=DIR: the suite's tree
        self.source_overrides = source_overrides or {}   # build --src: the package's tree
        self._gpu: bool | None = None

    def gpu_visible(self) -> bool:
        if self._gpu is None:
            from .verify.smoke import Device, probe_device
            self._gpu = isinstance(probe_device(self.python), Device)
        return self._gpu

    def tree(self, recipe) -> Path:
        """The directory the suite's ``path`` is relative to (raises SourceError)."""
        from . import sources
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
        from .errors import CuforgeError
        from .verify import CheckResult
        from .verify.upstream import CHECK, run_upstream_tests
        from .verify.wheel import import_roots, top_level_modules, unpack
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
                                  else None)


def record_check(wheel: Path, result) -> None:
    """Append the wheel's manifest line again with ``result`` among its checks (the manifest
    is a journal: the newest line of a package is its state)."""
    from dataclasses import replace
    from datetime import datetime, timezone
    house = Wheelhouse(wheel.parent)
    recorded = [e for e in house.entries() if e.wheel == wheel.name]
    if not recorded:
        return
    summary = result.detail if result.detail.startswith(result.status) else \
        f"{result.status}: {result.detail}"
    entry = recorded[-1]
    house.publish(None, replace(entry, checks={**entry.checks, result.check: summary},
                                time=datetime.now(timezone.utc).isoformat(timespec="seconds")))


def upstream_stage(project: Project, python: Path, combo: Combo, house_dir: Path, entries,
                   recipes: dict, source_overrides: dict[str, Path], console) -> None:
    """A build's last stage (``build --upstream-tests``): each built or prebuilt wheel's
    upstream suite, its verdict printed and recorded in the manifest."""
    from packaging.utils import canonicalize_name

    from .console import verdict_line
    by_name = {canonicalize_name(n): r for n, r in recipes.items()}
    wheels = {e.package: house_dir / e.wheel for e in entries
              if e.status in ("compiled", "prebuilt") and e.wheel}
    by_package = {canonicalize_name(n): w for n, w in wheels.items()}
    stage = UpstreamStage(project, python, combo, {}, source_overrides)
    with tempfile.TemporaryDirectory(prefix="cuforge-suites-") as tmp:
        for name, wheel in wheels.items():
            recipe = recipes.get(name)
            if recipe is None or recipe.upstream_tests is None:
                continue
            deps = dependency_roots(recipe, by_name, by_package, Path(tmp))
            result = stage.run(wheel, recipe, deps, imported_ok=True, tmp=Path(tmp))
            record_check(wheel, result)
            summary = result.detail if result.detail.startswith(result.status) else \
                f"{result.status}: {result.detail}"
            console.print(verdict_line(name, {result.check: summary}, reason_width=200))


# cumm and spconv name their wheels after the CUDA version: cumm-cu130, spconv-cu126.
_CUDA_SUFFIX = re.compile(r"-cu\d+$")


def recipe_for(package: str, recipes: dict):
    """The recipe of a wheel's (normalised) package name: ``torch-scatter``, or ``spconv-cu130``
    for the spconv recipe; None for wheels cuforge has no recipe for."""
    return recipes.get(package) or recipes.get(_CUDA_SUFFIX.sub("", package))


def dependency_roots(recipe, recipes: dict, by_package: dict[str, Path], tmp: Path) -> list[Path]:
    """Import roots of the wheels that ``recipe`` depends on (transitively) among the wheels
    being verified, unpacked once each under ``tmp``: spconv needs cumm to import."""
    from packaging.utils import canonicalize_name

    from .verify.wheel import import_roots, unpack
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
        (w for pkg, w in by_package.items() if _CUDA_SUFFIX.sub("", pkg) == name), None)


def verify_paths(project: Project, combo: Combo, paths: list[Path], *, as_json: bool,
                 arches_given: bool, models: bool = False, upstream_tests: bool = False,
                 tests_src: dict[str, Path] | None = None) -> int:
    from .verify import render_table, reports_to_json, verify_wheel
    from .verify.wheel import package_name
    env = venv.prepare(project.state_dir, combo, log=project.state_dir / "logs" / "verify.log",
                       emulator=emulation.for_combo(project, combo))
    from packaging.utils import canonicalize_name
    recipes = {canonicalize_name(name): r for name, r in load_recipes(project).items()}
    wheels = collect_wheels(paths)
    by_package = {package_name(w): w for w in wheels}
    reports = []
    suites = UpstreamStage(project, env.python, combo, tests_src or {}) if upstream_tests else None
    with tempfile.TemporaryDirectory(prefix="cuforge-deps-") as tmp:
        for wheel in wheels:
            recipe = recipe_for(package_name(wheel), recipes)
            archs = combo.arches if arches_given else _requested_from_manifest(wheel) or combo.arches
            ctx = verify_context(env, archs)
            smoke = smoke_script(project, recipe) if recipe else None
            modules = list(recipe.modules) if recipe else None
            deps = dependency_roots(recipe, recipes, by_package, Path(tmp)) if recipe else []
            report = verify_wheel(wheel, ctx, smoke=smoke, modules=modules,
                                  dependency_paths=deps)
            if (recorded := manifest_check(wheel)) is not None:
                report.results.append(recorded)
            if (pinned := wheelmeta.check(wheel)) is not None:   # in <cuXYZ>/torch<V>-cp<XY>
                report.results.append(pinned)
            if suites is not None:
                imported = report.result("import")
                result = suites.run(wheel, recipe, deps, imported_ok=bool(
                    imported and imported.status != "fail"), tmp=Path(tmp))
                report.results.append(result)
                if recorded is not None and recorded.status == "pass":
                    record_check(wheel, result)   # the manifest line gains the verdict
            reports.append(report)
    if models:
        reports += model_reports(project, env, collect_wheels(paths))
    if as_json:
        print(reports_to_json(reports))
    else:
        make_console().print(render_table(reports))
    tampered = [r for r in reports if (m := r.result("manifest")) and m.status == "fail"]
    if tampered:
        raise VerifyError("\n".join(r.result("manifest").detail for r in tampered),
                          hint="do not install it; rebuild it (cuforge build --only PKG "
                          "--rebuild) or delete it and its manifest line")
    return 0 if all(r.ok for r in reports) else 7


def manifest_check(wheel: Path):
    """A wheel inside a cuforge wheelhouse must still have the bytes its manifest line
    recorded (sha256): anything else was altered or replaced after verification."""
    from .digest import sha256_of
    from .verify import CheckResult
    recorded = [e for e in Wheelhouse(wheel.parent).entries() if e.wheel == wheel.name]
    if not recorded:
        return None     # not from a cuforge wheelhouse: nothing to compare with
    digest = sha256_of(wheel)
    if digest == recorded[-1].wheel_sha256:
        return CheckResult("manifest", "pass", "sha256 matches the manifest")
    return CheckResult("manifest", "fail", f"{wheel} has sha256 {digest}, but the manifest "
                       f"recorded {recorded[-1].wheel_sha256}: its bytes changed after it was "
                       "verified")

def _requested_from_manifest(wheel: Path):
    """The arch list the wheel was built for, when it sits in a cuforge wheelhouse."""
    from .arches import parse_arch_list
    for entry in reversed(Wheelhouse(wheel.parent).entries()):
        if entry.wheel == wheel.name and entry.arches_requested:
            return parse_arch_list(entry.arches_requested)
    return None
