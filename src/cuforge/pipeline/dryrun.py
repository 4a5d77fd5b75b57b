"""``--dry-run``: print the build plan (``cuforge.pipeline.plan``): every command exactly as a build
would run it, with its environment, and each package's key; nothing is created, fetched,
built or written. Lines that are not comments are the commands, in order."""

from __future__ import annotations

from pathlib import Path

from cuforge.pipeline import sources
from cuforge.env import venv
from cuforge.core.console import QuietPipeConsole, duration
from cuforge.pipeline.plan import Action, ActionKind, PackagePlan, make_plan, up_to_date
from cuforge.core.project import Project
from cuforge.config.recipes import Recipe
from cuforge.pipeline.request import BuildRequest
from cuforge.publish.wheelhouse import Wheelhouse


def dry_run(project: Project, req: BuildRequest, order: list[Recipe], log_dir: Path) -> dict:
    """Print the plan a build of ``order`` would run; build nothing, write nothing. The env is
    read as the build would find it (``venv.inspect``), so the wheel dir and keys printed are
    the build's; a venv not created yet is predicted (``venv.predicted``). Returns the plan as
    data (``build --dry-run --json``). ``log_dir``: the build's, named in its commands."""
    combo, target = req.combo, req.target
    out = QuietPipeConsole(highlight=False, soft_wrap=True)
    out.print(f"# dry run: combo {combo.id}, torch {combo.torch}, CUDA {combo.accel.cuda}, "
              f"arches {combo.arches}")
    out.print(f"# build order: {' -> '.join(r.name for r in order)}")
    if target.emulated:
        out.print(f"# emulated: {combo.target_platform.name} code runs under QEMU "
                  "(envs/emulation.toml); every command below gets "
                  + " ".join(f"{k}={v}" for k, v in target.env))
    combo_env = venv.inspect(project.state_dir, combo, target)
    if combo_env is None:
        for step in venv.creation_steps(project.state_dir, combo, target):
            out.print(step.render(), markup=False)
        combo_env = venv.predicted(project.state_dir, combo, target)
        out.print("# the env does not exist yet: the paths below are as it will be made")
    elif combo_env.root is not None:
        out.print(f"# env {combo_env.root} is ready: nothing to install")
    else:
        out.print(f"# interpreter {combo_env.python}: torch {combo_env.info.torch_full}"
                  + (f" (not the combo's {combo.torch}: its own decides)"
                     if combo_env.combo.torch != combo.torch else ""))
    plan = make_plan(project, req, combo_env, order, log_dir=log_dir)
    out.print(f"# wheel dir: {plan.wheel_dir}")
    how = (f"each may start {plan.jobs} compilers, and {plan.jobs} compile slots "
           "($CUFORGE_SLOTS, a FIFO made when the build starts) keep the machine at the budget"
           if plan.pooled else "each within its share")
    out.print(f"# jobs budget {plan.jobs}: packages at the same depth build side by side, {how}")
    current = _up_to_date(plan, req)
    house = Wheelhouse(plan.wheel_dir)
    rows = []
    for pkg in plan.packages:
        last = house.last_build(pkg.name)
        lines = (up_to_date_lines(pkg, current[pkg.name]) if pkg.name in current
                 else package_lines(project, pkg, last))
        for line in lines:
            out.print(line, markup=False)
        rows.append(package_row(pkg, pkg.name in current, last))
    if len(current) == len(plan.packages):
        out.print(f"\n# every wheel is up to date in {plan.wheel_dir}: the build would build "
                  "nothing (--rebuild builds them again)")
    else:
        out.print(f"\n# then: publish each verified wheel into {plan.wheel_dir}")
    return {"dry_run": True, "combo": combo.id, "torch": combo.torch,
            "cuda": str(combo.accel.cuda), "arches": combo.arches.torch(),
            "wheel_dir": str(plan.wheel_dir), "jobs": plan.jobs, "packages": rows}


def _up_to_date(plan, req: BuildRequest) -> dict:
    """The wheelhouse entries the build would keep as they are (same key, wheel intact),
    as the build itself decides (plan.up_to_date); none with --rebuild."""
    if req.rebuild:
        return {}
    house = Wheelhouse(plan.wheel_dir)
    found = {pkg.name: up_to_date(house, pkg) for pkg in plan.packages}
    return {name: entry for name, entry in found.items() if entry is not None}


def package_row(pkg: PackagePlan, current: bool, last) -> dict:
    """One package of the plan as data (``build --dry-run --json``, docs/json.md)."""
    return {"name": pkg.name, "kind": str(pkg.recipe.kind), "key": pkg.key, "jobs": pkg.jobs,
            "arches": pkg.archs.torch(), "up_to_date": current, "skip": pkg.skip or None,
            "last_build_seconds": last.build_seconds if last else None,
            "commands": [] if current or pkg.skip else [
                {"description": s.description, "cwd": str(s.cwd) if s.cwd else None,
                 "env": dict(s.env), "argv": list(s.argv)} for s in pkg.commands()]}


def last_build_line(last) -> str:
    """How long the last build of the package took here, from the wheelhouse's manifest.

    >>> from cuforge.publish.wheelhouse import Entry
    >>> last = Entry("demo", "compiled", build_seconds=72.4, time="2026-12-05T10:00:00+00:00")
    >>> last_build_line(last)
    '# last build here: 1 min 12 s (2026-12-05T10:00:00+00:00)'
    """
    if last is None:
        return "# last build here: none recorded in this wheelhouse"
    return f"# last build here: {duration(last.build_seconds)} ({last.time})"


def up_to_date_lines(pkg: PackagePlan, entry) -> list[str]:
    return [f"\n# ---- {pkg.name} ({pkg.recipe.kind}) ----", f"# key {pkg.key}",
            f"# up to date: {entry.wheel} has this key in the wheelhouse; the build keeps it "
            "and runs nothing for it (--rebuild builds it again)"]


def package_lines(project: Project, pkg: PackagePlan, last=None) -> list[str]:
    """One package of the plan as text: comments, then the commands in order; ``last``: the
    manifest entry of its last build here (how long it took)."""
    lines = [f"\n# ---- {pkg.name} ({pkg.recipe.kind}, {pkg.jobs} jobs) ----",
             f"# key {pkg.key}"]
    if not pkg.skip:
        lines.append(last_build_line(last))
    if pkg.jobs_note:
        lines.append(f"# {pkg.jobs_note}")
    if pkg.kernels:   # a [kernels] recipe (spconv): which kernel set the wheel will hold
        lines.append(f"# kernels: {pkg.kernels}")
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
