"""``invoke verify PATH``: re-run every check on wheels (ours or anybody's) against a combo."""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rich.text import Text

from cuforge.env import venv
from cuforge.env.venv import ComboEnv
from cuforge.publish import wheelmeta
from cuforge.config.combos import Combo
from cuforge.core import jsonout
from cuforge.core.console import duration, make_console, plural, timed
from cuforge.core.errors import ConfigError, VerifyError
from cuforge.verify.checks import smoke_script
from cuforge.core.project import Project
from cuforge.config.recipes import load_recipes
from cuforge.env.target import resolve
from cuforge.pipeline.upstream_stage import (CUDA_SUFFIX, UpstreamStage, dependency_roots,
                                             record_check, recipe_for)
from cuforge.publish.wheelhouse import Wheelhouse


def collect_wheels(paths: list[Path], wheelhouse: Path | None = None) -> list[Path]:
    """The wheels named by ``paths`` (wheel files, directories of wheels); a path that is
    neither, or no wheel at all, names the wheelhouse directories there are instead."""
    wheels: list[Path] = []
    for p in paths:
        if p.is_dir():
            wheels += sorted(p.glob("*.whl"))
        elif p.suffix == ".whl" and p.is_file():
            wheels.append(p)
        else:
            raise ConfigError(f"{p} is neither a wheel nor a directory of wheels",
                              hint=_existing_dirs(wheelhouse))
    if not wheels:
        raise ConfigError(f"no wheels in {', '.join(map(str, paths))}",
                          hint=_existing_dirs(wheelhouse))
    return wheels


def _existing_dirs(wheelhouse: Path | None) -> str:
    """The fix for a verify path that holds no wheel: the wheelhouse dirs that do."""
    dirs = [d for d in sorted(wheelhouse.glob("*/*/*")) if any(d.glob("*.whl"))] \
        if wheelhouse and wheelhouse.is_dir() else []
    if not dirs:
        where = f" ({wheelhouse} has none yet)" if wheelhouse else ""
        return f"name a wheel file or a directory of wheels{where}; `cuforge build` makes them"
    return "name a wheel file or one of these wheelhouse directories: " + ", ".join(
        str(_shown(d)) for d in dirs)


def _shown(path: Path) -> Path:
    """``path`` relative to the current directory when it lies below it (shorter to copy)."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def model_reports(project: Project, combo_env: ComboEnv, wheels: list[Path]) -> list:
    """Run each stack's miniature (``miniature`` in ``stacks/*.toml``: ptv3_tiny, milo_tiny)
    whose required packages are all among ``wheels``, with every wheel importable together
    (the model stage for wheels used without a checkout), reported like one package per
    model. A stack whose packages are not all there is listed as skipped, saying which."""
    from packaging.utils import canonicalize_name

    from cuforge.config.stacks import available_stacks, load_stack
    from cuforge.verify import CheckResult, WheelReport
    from cuforge.verify.smoke import check_smoke
    from cuforge.verify.wheel import import_roots, package_name, unpack
    have = {CUDA_SUFFIX.sub("", package_name(w)) for w in wheels}
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
                result = check_smoke(combo_env.python, script, roots,
                                     env=dict(combo_env.target.step_env()))
            out.append(WheelReport(script, f"model:{script.stem}",
                                   [CheckResult("smoke", result.status, result.detail)]))
    return out


def verify_paths(project: Project, combo: Combo, paths: list[Path], *, arches_given: bool,
                 models: bool = False, upstream_tests: bool = False,
                 tests_src: dict[str, Path] | None = None, stress: bool = False,
                 sanitize: bool = False, ptx_jit: bool = False) -> int:
    from cuforge.publish.index import has_index, verify_index
    from cuforge.verify import check_host, context_from, render_table, verify_wheel
    from cuforge.verify.report import outcome_line
    from cuforge.verify.wheel import package_name
    for path in paths:   # first: reading bytes, no env; a stale index fails what installs from it
        if path.is_dir() and has_index(path):
            verify_index(path)
    combo_env = venv.prepare(project.state_dir, combo, resolve(project, combo),
                             log=project.state_dir / "logs" / "verify.log", compiles=False)
    from packaging.utils import canonicalize_name
    recipes = {canonicalize_name(name): r for name, r in load_recipes(project).items()}
    wheels = collect_wheels(paths, project.wheelhouse)
    by_package = {package_name(w): w for w in wheels}
    reports = []
    suites = (UpstreamStage(project, combo_env.python, combo, tests_src or {},
                            run_env=combo_env.target.step_env()) if upstream_tests else None)
    stages = _stress_stages(project, combo_env, stress=stress, sanitize=sanitize, ptx_jit=ptx_jit)
    started, now = time.monotonic(), {"wheel": ""}
    beat = timed(lambda: f"verify: {now['wheel']}, wheel {len(reports) + 1} of {len(wheels)}")
    hosted = check_host.serving(combo_env.python, combo_env.target.step_env(),
                                enabled=not combo_env.target.emulated)
    checking = context_from(combo_env.info, None, combo_env.target.step_env(),
                            no_device=combo_env.target.no_device,
                            sysroot=combo_env.target.sysroot,
                            glibc_floor=combo.glibc_floor, combo=combo.id)
    with tempfile.TemporaryDirectory(prefix="cuforge-deps-") as tmp, beat, hosted:
        for wheel in wheels:
            now["wheel"] = wheel.name
            recipe = recipe_for(package_name(wheel), recipes)
            archs = combo.arches if arches_given else _requested_from_manifest(wheel) or combo.arches
            ctx = replace(checking, requested=archs)
            smoke = smoke_script(project, recipe) if recipe else None
            modules = list(recipe.modules) if recipe else None
            deps = dependency_roots(recipe, recipes, by_package, Path(tmp)) if recipe else []
            report = verify_wheel(wheel, ctx, smoke=smoke, modules=modules,
                                  dependency_paths=deps)
            if (recorded := manifest_check(wheel)) is not None:
                report.results.append(recorded)
            if (built_with := cccl_check(wheel)) is not None:
                report.results.append(built_with)
            if (pinned := wheelmeta.check(wheel)) is not None:   # in <cuXYZ>/torch<V>-cp<XY>
                report.results.append(pinned)
            if suites is not None:
                imported = report.result("import")
                result = suites.run(wheel, recipe, deps, imported_ok=bool(
                    imported and not imported.failed), tmp=Path(tmp))
                report.results.append(result)
                if recorded is not None and not recorded.failed:
                    record_check(wheel, result)   # the manifest line gains the verdict
            for stage in stages:
                imported = report.result("import")
                result = stage.run(wheel, recipe, deps, imported_ok=bool(
                    imported and not imported.failed), tmp=Path(tmp))
                report.results.append(result)
                if recorded is not None and not recorded.failed:
                    record_check(wheel, result)
            reports.append(report)
    verified_wheels = len(reports)   # the model rows below are not wheels
    if models:
        reports += model_reports(project, combo_env, collect_wheels(paths, project.wheelhouse))
    failed = [r.package for r in reports if not r.ok]
    # --json: the reports go into the command's document (docs/json.md), the table to stderr
    jsonout.update(wheels=[r.to_dict() for r in reports], verified_wheels=verified_wheels,
                   failed=failed)
    make_console().print(render_table(reports))
    make_console().print(Text(
        f"verified {plural(verified_wheels, 'wheel')}"
        + (f" and {plural(len(reports) - verified_wheels, 'model row')}"
           if len(reports) > verified_wheels else "")
        + f" in {duration(time.monotonic() - started)}: {outcome_line(reports)}"),
        soft_wrap=True)
    tampered = [r for r in reports if (m := r.result("manifest")) and m.failed]
    if tampered:
        raise VerifyError("\n".join(r.result("manifest").detail for r in tampered),
                          hint="do not install it; rebuild it (cuforge build --only PKG "
                          "--rebuild) or delete it and its manifest line")
    return 0 if all(r.ok for r in reports) else VerifyError.exit_code


def _stress_stages(project: Project, combo_env: ComboEnv, *, stress: bool, sanitize: bool,
                   ptx_jit: bool = False) -> list:
    """The stress stages asked for: the full run, the short one under compute-sanitizer (made
    first, so a missing sanitizer stops verify before any check runs); ``ptx_jit``: both on
    the wheels' PTX."""
    from cuforge.pipeline.stress_stage import StressStage
    return [*([StressStage(project, combo_env, ptx_jit=ptx_jit)] if stress else []),
            *([StressStage(project, combo_env, sanitize=True, ptx_jit=ptx_jit)]
              if sanitize else [])]


def manifest_check(wheel: Path):
    """A wheel inside a cuforge wheelhouse must still have the bytes its manifest line
    recorded (sha256): anything else was altered or replaced after verification."""
    from cuforge.core.digest import sha256_of
    from cuforge.verify import CheckResult
    recorded = [e for e in Wheelhouse(wheel.parent).entries() if e.wheel == wheel.name]
    if not recorded:
        return None     # not from a cuforge wheelhouse: nothing to compare with
    digest = sha256_of(wheel)
    if digest == recorded[-1].wheel_sha256:
        return CheckResult("manifest", "pass", "sha256 matches the manifest")
    return CheckResult("manifest", "fail", f"{wheel} has sha256 {digest}, but the manifest "
                       f"recorded {recorded[-1].wheel_sha256}: its bytes changed after it was "
                       "verified")

def cccl_check(wheel: Path):
    """``warn`` when the manifest says the wheel was compiled against a CCCL with a known fault
    (data/cccl.toml), ``pass`` for a clean one; None when no CCCL was recorded (prebuilt, or a
    manifest line older than the field)."""
    from cuforge.env.cccl import known_faults
    from cuforge.verify import CheckResult
    recorded = [e for e in Wheelhouse(wheel.parent).entries() if e.wheel == wheel.name]
    version = recorded[-1].cccl if recorded else ""
    if not version:
        return None
    faults = known_faults(version)
    if not faults:
        return CheckResult("cccl", "pass", f"built with CCCL {version}: no known fault")
    return CheckResult("cccl", "warn", f"built with CCCL {version}, which has "
                       + "; ".join(faults) + " (rebuild: cu130 builds take CCCL 3.1 first, "
                       "envs/accels.toml cccl_overlay)")


def _requested_from_manifest(wheel: Path):
    """The arch list the wheel was built for, when it sits in a cuforge wheelhouse."""
    from cuforge.config.arches import parse_arch_list
    for entry in reversed(Wheelhouse(wheel.parent).entries()):
        if entry.wheel == wheel.name and entry.arches_requested:
            return parse_arch_list(entry.arches_requested)
    return None
