"""``--dry-run``: print the build plan (``cuforge.plan``): every command exactly as a build
would run it, with its environment, and each package's key; nothing is created, fetched,
built or written. Lines that are not comments are the commands, in order."""

from __future__ import annotations

from pathlib import Path

from . import emulation, sources, venv
from .combos import Combo
from .console import QuietPipeConsole
from .errors import CuforgeError
from .plan import Action, ActionKind, PackagePlan, make_plan
from .project import Project
from .recipes import Recipe
from .toolchain import Toolkit
from .torchinfo import TorchInfo


def dry_run(project: Project, req, order: list[Recipe]) -> None:
    """Print the plan a build of ``order`` would run; build nothing, write nothing."""
    combo = req.combo
    out = QuietPipeConsole(highlight=False, soft_wrap=True)
    out.print(f"# dry run: combo {combo.id}, torch {combo.torch}, CUDA {combo.accel.cuda}, "
              f"arches {combo.arches}")
    out.print(f"# build order: {' -> '.join(r.name for r in order)}")
    emulator = emulation.for_combo(project, combo)
    env = _predicted_env(project, combo, emulator)
    if emulator is not None:
        out.print(f"# emulated: {combo.target.name} code runs under QEMU (envs/emulation.toml); "
                  + " ".join(f"{k}={v}" for k, v in
                             emulation.variables(project.state_dir, emulator).items()))
    if not combo.interpreter and not venv.is_ready(project.state_dir, combo):
        base = str(emulator.python(project.state_dir, combo.python) if emulator else
                   _find_python_or_name(combo.python))
        for step in venv.creation_steps(project.state_dir, combo, base):
            out.print(step.render(), markup=False)
    elif not combo.interpreter:
        out.print(f"# env {venv.env_dir(project.state_dir, combo)} is ready: nothing to install")
    plan = make_plan(project, req, env, order)
    how = (f"each may start {plan.jobs} compilers, and {plan.jobs} compile slots "
           "($CUFORGE_SLOTS, a FIFO made when the build starts) keep the machine at the budget"
           if plan.pooled else "each within its share")
    out.print(f"# jobs budget {plan.jobs}: packages at the same depth build side by side, {how}")
    current = _up_to_date(plan, req)
    for pkg in plan.packages:
        lines = (up_to_date_lines(pkg, current[pkg.name]) if pkg.name in current
                 else package_lines(project, pkg))
        for line in lines:
            out.print(line, markup=False)
    if len(current) == len(plan.packages):
        out.print(f"\n# every wheel is up to date in {plan.wheel_dir}: the build would build "
                  "nothing (--rebuild builds them again)")
    else:
        out.print(f"\n# then: publish each verified wheel into {plan.wheel_dir}")


def _up_to_date(plan, req) -> dict:
    """The wheelhouse entries the build would keep as they are (same key, wheel intact),
    as the build itself decides (pipeline.up_to_date); none with --rebuild."""
    from .pipeline import up_to_date
    from .wheelhouse import Wheelhouse
    if getattr(req, "rebuild", False):
        return {}
    house = Wheelhouse(plan.wheel_dir)
    found = {pkg.name: up_to_date(house, pkg) for pkg in plan.packages}
    return {name: entry for name, entry in found.items() if entry is not None}


def up_to_date_lines(pkg: PackagePlan, entry) -> list[str]:
    return [f"\n# ---- {pkg.name} ({pkg.recipe.kind}, key {pkg.key[:16]}) ----",
            f"# up to date: {entry.wheel} has this key in the wheelhouse; the build keeps it "
            "and runs nothing for it (--rebuild builds it again)"]


def package_lines(project: Project, pkg: PackagePlan) -> list[str]:
    """One package of the plan as text: comments, then the commands in order."""
    lines = [f"\n# ---- {pkg.name} ({pkg.recipe.kind}, {pkg.jobs} jobs, key {pkg.key[:16]}) ----"]
    if pkg.jobs_note:
        lines.append(f"# {pkg.jobs_note}")
    if pkg.skip:
        return [*lines, f"# would skip {pkg.name}: {pkg.skip}"]
    if pkg.prebuilt:
        lines.append("# first: the published wheel; if it passes the checks, nothing is "
                     "compiled")
        lines += [_render(project, pkg, a) for a in pkg.prebuilt]
        lines.append("# else: build from source")
    lines += [_render(project, pkg, a) for a in pkg.actions]
    return lines


def _render(project: Project, pkg: PackagePlan, action: Action) -> str:
    if action.step is not None:
        return action.step.render()
    text = f"# {action.kind}: {action.what}"
    if action.kind is ActionKind.FETCH:
        source = (dict(pkg.recipe.extra_sources)[action.arg] if action.arg
                  else pkg.recipe.source)
        for step in sources.describe_steps(source, project.root, project.state_dir / "cache",
                                           action.path):
            text += "\n#   " + step.render().replace("\n", "\n#   ")
    return text


def _predicted_env(project: Project, combo: Combo,
                   emulator: emulation.Emulator | None) -> venv.ComboEnv:
    """The env as it will be, without creating it (for --dry-run)."""
    root = venv.env_dir(project.state_dir, combo)
    if combo.interpreter:   # nothing to predict: the build uses it as it is, or refuses it
        return venv.prepare(project.state_dir, combo, log=Path("/dev/null"), emulator=emulator)
    if venv.is_ready(project.state_dir, combo):
        try:
            return venv.prepare(project.state_dir, combo, log=Path("/dev/null"),
                                emulator=emulator)
        except CuforgeError:
            pass
    site = root / "lib" / f"python{combo.python}" / "site-packages"
    info = TorchInfo(python=root / "bin" / "python", py_version=combo.python, site_packages=site,
                     machine=combo.target.machine, torch=combo.torch, torch_full=combo.torch,
                     cuda=str(combo.accel.cuda), cxx11_abi=True, torch_lib=site / "torch" / "lib",
                     nvidia_include=(site / "nvidia" / "cu13" / "include",),
                     nvidia_lib=(site / "nvidia" / "cu13" / "lib",))
    return venv.ComboEnv(combo, info, Toolkit(root / "cuda", combo.accel.cuda), root, False)


def _find_python_or_name(version: str) -> Path | str:
    try:
        return venv.find_python(version)
    except CuforgeError:
        return f"python{version}"
