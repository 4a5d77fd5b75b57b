"""``invoke verify PATH``: re-run every check on wheels (ours or anybody's) against a combo."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from . import venv
from .combos import Combo
from .errors import ConfigError
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
    import tempfile

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


def verify_paths(project: Project, combo: Combo, paths: list[Path], *, as_json: bool,
                 arches_given: bool, models: bool = False) -> int:
    from .verify import render_table, reports_to_json, verify_wheel
    from .verify.wheel import package_name
    env = venv.prepare(project.state_dir, combo, log=project.state_dir / "logs" / "verify.log")
    from packaging.utils import canonicalize_name
    recipes = {canonicalize_name(name): r for name, r in load_recipes(project).items()}
    reports = []
    for wheel in collect_wheels(paths):
        recipe = recipes.get(package_name(wheel))   # normalised: cuforge-demo, torch-scatter
        archs = combo.arches if arches_given else _requested_from_manifest(wheel) or combo.arches
        ctx = verify_context(env, archs)
        smoke = smoke_script(project, recipe) if recipe else None
        modules = list(recipe.modules) if recipe else None
        reports.append(verify_wheel(wheel, ctx, smoke=smoke, modules=modules))
    if models:
        reports += model_reports(project, env, collect_wheels(paths))
    if as_json:
        print(reports_to_json(reports))
    else:
        Console().print(render_table(reports))
    return 0 if all(r.ok for r in reports) else 7


def _requested_from_manifest(wheel: Path):
    """The arch list the wheel was built for, when it sits in a cuforge wheelhouse."""
    from .arches import parse_arch_list
    for entry in reversed(Wheelhouse(wheel.parent).entries()):
        if entry.wheel == wheel.name and entry.arches_requested:
            return parse_arch_list(entry.arches_requested)
    return None
