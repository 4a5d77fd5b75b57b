"""Where a package's wheel comes from, in order: the team's (``--wheels``: downloaded, its
pins checked as published, then every check a wheel built here gets), the recipe's prebuilt
one (kept only when it passes every check of ``verify.checklist.PREBUILT_MUST_PASS``, the
smoke test among them; compiled instead otherwise), or one built here from
source (under the compiler cache; built again without it when sccache itself failed). Each
is a function of the build's context (``pipeline.context.BuildContext``); the checks are the
gate's (``gate.verify``)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from rich.markup import escape

from cuforge.config.recipes import Recipe
from cuforge.core import runner
from cuforge.core.console import make_console
from cuforge.core.digest import sha256_of
from cuforge.core.errors import BuildError, CuforgeError
from cuforge.pipeline import actions, compiler_cache, gate
from cuforge.pipeline.context import BuildContext
from cuforge.pipeline.made import Ahead, Made, Refused
from cuforge.pipeline.plan import Action, ActionKind, PackagePlan
from cuforge.publish.wheelhouse import Status
from cuforge.verify.checklist import PREBUILT_MUST_PASS
from cuforge.verify.floor import floor_of_wheel

console = make_console(stderr=True)


def wheel_for(ctx: BuildContext, pkg: PackagePlan, log: Path, say) -> Made:
    """A verified wheel: the team's (--wheels), an accepted prebuilt one, or one compiled
    here."""
    note = ""
    if ctx.req.team_wheels:
        say("trying the team's wheel")
        got = _try_team(ctx, pkg, log)
        if isinstance(got, Made):
            return got
        console.print(f"[yellow]{escape(pkg.name)}[/]: {escape(got.why)}; building it here")
    if pkg.prebuilt:
        say("trying the prebuilt wheel")
        got = _try_prebuilt(ctx, pkg, log)
        if isinstance(got, Made):
            return got
        note = got.why
        console.print(f"[yellow]{escape(pkg.name)}[/]: {escape(note)}; compiling instead")
    with compiler_cache.own_failure(pkg.cache) as sccache:
        _build_from_source(ctx, pkg, pkg.cache, log, say)
    if sccache.why:   # sccache failed, not the compiler: the build again without it
        console.print(f"[yellow]warning[/]: {escape(pkg.name)}: sccache failed "
                      f"({escape(sccache.why)}); building again without the compiler cache")
        _build_from_source(ctx, replace(pkg, actions=_without_cache(pkg)), None, log, say,
                           why_off=f"sccache failed ({sccache.why}); built without it")
    wheel = _single_wheel(pkg.work / "dist", pkg.recipe)
    say("verifying")
    checks, embedded = gate.verify(ctx, pkg, wheel, log)
    how = Status.COMPILED if pkg.recipe.kind.compiles else Status.PREBUILT
    return Made(wheel, how, checks, embedded, note)


def _build_from_source(ctx: BuildContext, pkg: PackagePlan, cache, log: Path, say,
                       why_off: str = "") -> None:
    """Every action before verification, under ``cache`` (None: no compiler cache)."""
    with compiler_cache.serve(cache, why_off or pkg.cache_off, log,
                              say=console.print) as cached:
        ctx.state.cache_reports[pkg.name] = cached
        for action in pkg.actions:
            if action.kind is ActionKind.VERIFY:
                break
            say(action.what)
            actions.do(ctx, pkg, action, log)


def _try_prebuilt(ctx: BuildContext, pkg: PackagePlan, log: Path) -> Made | Refused:
    """Run the plan's prebuilt actions; keep the wheel only if it passes every check a
    prebuilt wheel must pass (``verify.checklist.PREBUILT_MUST_PASS``: fatbin's coverage of
    the arches and the smoke test among them). Else: why not."""
    from cuforge.verify import verify_wheel
    try:
        for action in pkg.prebuilt:
            if action.kind is not ActionKind.ACCEPT:
                actions.do(ctx, pkg, action, log)
        wheel = _single_wheel(pkg.work / "prebuilt", pkg.recipe)
    except CuforgeError as err:
        return Refused(f"no usable prebuilt wheel ({str(err).splitlines()[0]})")
    try:
        gate.install_runtime_requirements(ctx, wheel, log)
    except CuforgeError as err:
        return Refused(f"prebuilt {wheel.name}: its requirements do not install ({err})")
    with gate.timed_check(ctx):
        report = verify_wheel(wheel, replace(ctx.checking, requested=pkg.archs),
                              **gate.smoke(ctx, pkg.recipe),
                              modules=list(pkg.recipe.modules),
                              dependency_paths=gate.dependency_paths(pkg))
    bad = [r for r in report.failures() if r.check in PREBUILT_MUST_PASS]
    if bad:
        why = "; ".join(f"{r.check}: {r.summary}" for r in bad)
        return Refused(f"prebuilt {wheel.name} rejected ({why})")
    return Made(wheel, Status.PREBUILT, report.checks, report.embedded)


def _team_index(ctx: BuildContext) -> list:
    from cuforge.publish import teamwheels
    with ctx.env_lock:   # read once per run, by whichever package asks first
        if ctx.state.team is None:
            ctx.state.team = teamwheels.list_wheels(ctx.req.team_wheels)
        return ctx.state.team


def _team_candidates(ctx: BuildContext, name: str) -> list:
    """The team index's wheels that could be ``name``'s for this combo, newest first."""
    from cuforge.publish import teamwheels
    accel = ctx.plan.combo.accel.tag
    return teamwheels.candidates(
        _team_index(ctx), name, accel=accel, labels=_team_labels(ctx),
        python=f"cp{ctx.plan.combo.python.replace('.', '')}",
        platform_ok=ctx.plan.combo.target_platform.accepts)


def _team_labels(ctx: BuildContext) -> tuple[str, ...]:
    from cuforge.publish import wheelmeta
    accel = ctx.plan.combo.accel.tag
    return (wheelmeta.local_label(accel, gate.torch_build(ctx).version, links_torch=True),
            accel, "")


def _team_staging(ctx: BuildContext, pkg: PackagePlan) -> Path:
    # the pins check reads the combo from the directory's name, as in a wheelhouse
    return pkg.work / "team" / ctx.plan.wheel_dir.parent.name / ctx.plan.wheel_dir.name


def _download_team(ctx: BuildContext, name: str, dest: Path, log: Path) -> Path | Refused:
    """The team's newest wheel for ``name`` downloaded into ``dest`` (emptied first); else
    why there is none."""
    from cuforge.publish import teamwheels
    try:
        found = _team_candidates(ctx, name)
        if not found:
            labels = _team_labels(ctx)
            return Refused(f"the team index {ctx.req.team_wheels} has no wheel for it "
                           f"(+{labels[0]}, +{labels[1]} or pure, cp{ctx.plan.combo.python})")
        shutil.rmtree(dest, ignore_errors=True)
        wheel = teamwheels.download(found[0], dest)
    except CuforgeError as err:
        return Refused(f"no team wheel ({err.summary})")
    runner.note(log, f"team wheel {found[0].url}")
    return wheel


def _try_team(ctx: BuildContext, pkg: PackagePlan, log: Path) -> Made | Refused:
    """The team's newest wheel for this package and combo, downloaded and put through the
    pins/RECORD check as published, then every check a wheel built here gets; else why
    not. A refused wheel is kept in the work dir for inspection."""
    from cuforge.publish import wheelmeta
    staging = _team_staging(ctx, pkg)
    ahead = ctx.state.ahead.get(pkg.name)
    if ahead is not None and not _same_dependencies(ctx, ahead):
        runner.note(log, "checked beside its dependencies, but a dependency was not "
                    "published from the team wheel it was checked with: checking again")
        ahead = None
    wheel = ahead.made.wheel if ahead else _download_team(ctx, pkg.name, staging, log)
    if isinstance(wheel, Refused):
        return wheel
    floor = ahead.made.floor if ahead else floor_of_wheel(wheel)
    if (too_new := _beyond_this_machine(ctx, wheel, floor)):   # before anything is installed
        return Refused(too_new)
    pins = wheelmeta.check(wheel, staging, house=wheelmeta.versions_in(ctx.plan.wheel_dir))
    if pins is not None and pins.failed:
        return Refused(f"team wheel {wheel.name} refused (pins: {pins.detail})")
    if ahead is not None:
        runner.note(log, ahead.log.read_text().rstrip("\n"))
        made = ahead.made
    else:
        try:
            # its import needs its dependencies as a build here gets them (the DEPS
            # action): their wheels from this wheelhouse (the team's, accepted first)
            actions.deps(ctx, pkg, None, log)
            checks, embedded = gate.verify(ctx, pkg, wheel, log)
        except CuforgeError as err:
            return Refused(f"team wheel {wheel.name} refused ({err.summary})")
        made = Made(wheel, Status.PREBUILT, checks, embedded, team=ctx.req.team_wheels,
                    floor=floor)
    if pins is not None:
        made = replace(made, checks={**made.checks, pins.check: pins})
    return made


def check_ahead(ctx: BuildContext, pkg: PackagePlan) -> Ahead | None:
    """``--wheels``: the package's team wheel checked now, its dependencies' team wheels
    in its overlays, so that a chain (ccimport -> pccm -> cumm -> spconv: 31.5 s one after
    another on the H100) is checked side by side. Used only when each dependency is then
    published from that very wheel (``_try_team``); None: the usual order decides."""
    names = {p.name for p in ctx.plan.packages}
    if pkg.skip or any(d not in names for d in pkg.recipe.depends):
        return None
    log = pkg.work / "team-ahead.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("checked beside its dependencies\n")
    got = {name: _download_team(ctx, name, dest, log) for name, dest in
           [(pkg.name, _team_staging(ctx, pkg)),
            *((d, pkg.work / "team-deps" / d) for d in pkg.recipe.depends)]}
    if any(isinstance(w, Refused) for w in got.values()):
        return None
    floors = {name: floor_of_wheel(w) for name, w in got.items()}
    if any(_beyond_this_machine(ctx, got[n], f) for n, f in floors.items()):
        return None   # the usual order refuses it, saying why
    wheel = got.pop(pkg.name)
    deps = {dep: sha256_of(w) for dep, w in got.items()}
    for dep, w in got.items():
        runner.note(log, f"with {dep}'s team wheel {w.name} (sha256 {deps[dep][:12]}) in "
                    "its overlay")
    try:
        actions.deps(ctx, pkg, None, log, wheels=got)
        checks, embedded = gate.verify(ctx, pkg, wheel, log, say_failure=False)
    except CuforgeError as err:   # the usual order checks it again and says why
        runner.note(log, f"not taken ahead: {err.summary}")
        return None
    return Ahead(Made(wheel, Status.PREBUILT, checks, embedded, team=ctx.req.team_wheels,
                      floor=floors[pkg.name]), deps, log)


def _beyond_this_machine(ctx: BuildContext, wheel: Path, floor) -> str:
    """Why a team wheel cannot run here (its floor above this machine's glibc), else ``""``.
    An emulated combo's wheels run on another machine: not asked."""
    from cuforge.publish import teamwheels
    return "" if ctx.combo_env.target.emulated else teamwheels.beyond_this_machine(wheel, floor)


def _same_dependencies(ctx: BuildContext, ahead: Ahead) -> bool:
    latest = ctx.house.latest()
    return all((entry := latest.get(dep)) is not None and entry.wheel_sha256 == sha
               for dep, sha in ahead.deps.items())


def _without_cache(pkg: PackagePlan) -> tuple[Action, ...]:
    """The package's actions with each build command as it runs without the compiler cache."""
    plain = dict(pkg.uncached)
    return tuple(replace(a, step=plain.get(a.step, a.step)) if a.step else a
                 for a in pkg.actions if a.kind not in (ActionKind.SEED, ActionKind.REMEMBER))   # cache-only


def _single_wheel(staging: Path, recipe: Recipe) -> Path:
    wheels = sorted(staging.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"{recipe.name}: expected one wheel in {staging}, found {len(wheels)}")
    return wheels[0]
