"""The plan's in-process actions, one handler per ``ActionKind`` (``HANDLERS``): check the
system headers, guard against an installed copy, fetch, patch, clean, install the dependencies'
wheels into the package's overlay, seed and keep CMake's compiler detection, and run a command
(``Step``) exactly as planned. Each handler is a function of the build's context
(``pipeline.context.BuildContext``). The verification stages (``STAGES``) are the gate's
(``pipeline.gate``)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path

from cuforge.core import faults, runner
from cuforge.core.runner import Step, run
from cuforge.env import builddeps, syslibs
from cuforge.pipeline import sources
from cuforge.pipeline.builders import cmake_seed
from cuforge.pipeline.context import BuildContext
from cuforge.pipeline.plan import Action, ActionKind, PackagePlan, own_modules
from cuforge.config.checkout import pinned_hint
from cuforge.core.errors import BuildError, PatchError


def do(ctx: BuildContext, pkg: PackagePlan, action: Action, log: Path) -> None:
    """Carry out one action of the plan that is not a verification stage."""
    HANDLERS[action.kind](ctx, pkg, action, log)


def _check(ctx: BuildContext, pkg: PackagePlan, action: Action, log: Path) -> None:
    syslibs.require_headers(pkg.recipe, ctx.combo_env.target.sysroot)


def _guard(ctx: BuildContext, pkg: PackagePlan, action: Action, log: Path) -> None:
    builddeps.require_not_installed(ctx.combo_env.python, own_modules(pkg.recipe), pkg.name,
                                    ctx.run_env)


def _clean(ctx: BuildContext, pkg: PackagePlan, action: Action, log: Path) -> None:
    shutil.rmtree(action.path, ignore_errors=True)
    action.path.mkdir(parents=True)


def _fetch(ctx: BuildContext, pkg: PackagePlan, action: Action, log: Path) -> None:
    recipe = pkg.recipe
    if action.arg:   # an extra source, named by its variable
        source = dict(recipe.extra_sources)[action.arg]
    else:
        reset_build_dir(pkg.work, pkg.source_key, fresh=ctx.req.rebuild)
        source = recipe.source
    sources.fetch(source, project_root=ctx.project.root,
                  cache_dir=ctx.project.state_dir / "cache", dest=action.path,
                  stamp=pkg.source_key, fresh=ctx.req.rebuild)


def _patch(ctx: BuildContext, pkg: PackagePlan, action: Action, log: Path) -> None:
    from cuforge import patching   # lazily: only recipes with patches need the engine
    patch_set = patching.load_patch_set(action.arg, patches_dir=ctx.project.patches_dir)
    try:
        patching.apply(patch_set, action.path)
    except PatchError as err:
        if not pkg.recipe.source.checkout:
            raise
        raise PatchError(  # the user's version, not upstream's pin: say the way back
            f"{pkg.name} from your checkout ({pkg.recipe.source.checkout}): "
            + str(err).removesuffix(f"\n  fix: {err.hint}"),
            hint=pinned_hint(action.arg)) from None


def deps(ctx: BuildContext, pkg: PackagePlan, action: Action | None, log: Path, *,
         wheels: Mapping[str, Path] | None = None) -> None:
    for step in _deps_steps(ctx, pkg, log, wheels):   # its own overlay: its lock only
        run(step, log=log, stream=ctx.req.verbose, prefix=_prefix(ctx, pkg))


def _seed(ctx: BuildContext, pkg: PackagePlan, action: Action, log: Path) -> None:
    if cmake_seed.restore(action.path, Path(action.arg)):
        runner.note(log, f"seeded CMake's compiler detection from {action.arg}")


def _remember(ctx: BuildContext, pkg: PackagePlan, action: Action, log: Path) -> None:
    cmake_seed.remember(action.path, Path(action.arg))


def _run(ctx: BuildContext, pkg: PackagePlan, action: Action, log: Path) -> None:
    faults.point("compile")   # tests only (CUFORGE_FAULT): die as the build starts
    with ctx.env_lock if action.shares_env else nullcontext():
        run(action.step, log=log, stream=ctx.req.verbose, prefix=_prefix(ctx, pkg))


def _prefix(ctx: BuildContext, pkg: PackagePlan) -> str:
    return f"[{pkg.name}] " if ctx.side_by_side else ""


def _deps_steps(ctx: BuildContext, pkg: PackagePlan, log: Path | None = None,
                wheels: Mapping[str, Path] | None = None) -> list[Step]:
    """``pip install --target`` of each dependency's wheel (their names are known only once
    built; ``wheels``: given, as a team's checked ahead) into its own overlay dir, unless it
    is there already, file for file: a reinstall would give their headers new times and
    make ninja rebuild everything that includes them (``builddeps``)."""
    latest = ctx.house.latest()
    steps, same = [], []
    for dep, target in zip(pkg.recipe.depends,
                           builddeps.overlay_dirs(pkg.work, pkg.recipe.depends)):
        entry = latest.get(dep)
        if wheels is not None:
            wheel = wheels[dep]
        elif entry is None or not entry.wheel:
            raise BuildError(f"{pkg.name} needs {dep}, which has no wheel in the wheelhouse",
                             hint=f"build it first: --only {pkg.name} builds its "
                             "dependencies")
        else:
            wheel = ctx.house.verified(entry)   # the bytes its line recorded
        step = builddeps.install_step(ctx.combo_env.python, wheel, target, ctx.run_env)
        if step is None:
            same.append(wheel.name)
        else:
            steps.append(step)
    if same and log is not None:
        runner.note(log, "already in this package's overlay, file for file (not "
                    "reinstalled, so their files keep their times): " + " ".join(same))
    return steps


# One handler per action kind. The verification stages are the executor's own: the build from
# source stops at VERIFY, and a prebuilt wheel's ACCEPT is wheelsource._try_prebuilt's
# decision.
HANDLERS = {ActionKind.CHECK: _check, ActionKind.GUARD: _guard,
            ActionKind.FETCH: _fetch, ActionKind.PATCH: _patch,
            ActionKind.CLEAN: _clean, ActionKind.DEPS: deps,
            ActionKind.SEED: _seed, ActionKind.REMEMBER: _remember,
            ActionKind.RUN: _run}

STAGES = frozenset({ActionKind.VERIFY, ActionKind.ACCEPT})


def reset_build_dir(work: Path, source_key: str, *, fresh: bool = False) -> None:
    """A persistent build dir lets an interrupted build resume, but only for the same sources:
    files exported by ``git archive`` carry their commit's time, so after a move to an older
    commit ninja would call stale objects up to date. Another source key: a fresh build dir.
    ``fresh`` (``--rebuild``): a fresh one whatever the key; a rebuild reuses nothing."""
    marker = work / ".build.stamp"
    if fresh or not marker.exists() or marker.read_text() != source_key:
        shutil.rmtree(work / "build", ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        marker.write_text(source_key)
