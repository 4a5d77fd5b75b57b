"""``invoke verify PATH``: re-run every check on wheels (ours or anybody's) against a combo."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from rich.console import Console

from . import emulation, venv
from .combos import Combo
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
    """Run every ``smoke/models/*.py`` with all ``wheels`` importable together (the model stage:
    packages working with each other), reported like one package per model."""
    from .verify import CheckResult, WheelReport
    from .verify.smoke import check_smoke
    from .verify.wheel import import_roots, unpack
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        roots: list[Path] = []
        for i, wheel in enumerate(wheels):
            roots += import_roots(unpack(wheel, Path(tmp) / str(i)))
        for script in sorted((project.smoke_dir / "models").glob("*.py")):
            result = check_smoke(env.python, script, roots)
            out.append(WheelReport(script, f"model:{script.stem}",
                                   [CheckResult("smoke", result.status, result.detail)]))
    return out


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
                 arches_given: bool, models: bool = False) -> int:
    from .verify import render_table, reports_to_json, verify_wheel
    from .verify.wheel import package_name
    env = venv.prepare(project.state_dir, combo, log=project.state_dir / "logs" / "verify.log",
                       emulator=emulation.for_combo(project, combo))
    from packaging.utils import canonicalize_name
    recipes = {canonicalize_name(name): r for name, r in load_recipes(project).items()}
    wheels = collect_wheels(paths)
    by_package = {package_name(w): w for w in wheels}
    reports = []
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
            reports.append(report)
    if models:
        reports += model_reports(project, env, collect_wheels(paths))
    if as_json:
        print(reports_to_json(reports))
    else:
        Console().print(render_table(reports))
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
