"""The verification gate and what is published: a wheel is installed with its runtime
requirements and verified (``cuforge.verify``) before anything is published; a verified wheel
gets its pins written in (``publish.wheelmeta``), its manifest entry (how it came to be, its
checks, the arches it embeds, the plan's key) and is published (a package without a wheel,
skipped or FAILED, is the executor's one line). Each step is a function of the build's context
(``pipeline.context.BuildContext``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from cuforge.config.recipes import Recipe
from cuforge.core import runner
from cuforge.core.console import BuildProgress, make_console
from cuforge.core.errors import BuildError, VerifyError
from cuforge.core.runner import run
from cuforge.env import builddeps
from cuforge.pipeline import sources
from cuforge.pipeline.builders import pep517
from cuforge.pipeline.context import BuildContext
from cuforge.pipeline.made import Made
from cuforge.pipeline.plan import PackagePlan
from cuforge.publish.wheelhouse import Entry, Status
from cuforge.publish.wheelmeta import TorchBuild
from cuforge.publish.wheelmeta import wheel_requirements
from cuforge.verify.checks import log_report, smoke_script
from cuforge.verify.floor import Floor
from cuforge.verify.report import CheckResult, verdict_line

console = make_console(stderr=True)


def publish(ctx: BuildContext, pkg: PackagePlan, made: Made, log: Path, started: float
            ) -> Entry:
    """A verified wheel published: its pins written in (a team's wheel has them already), its
    manifest entry, and the verdict line."""
    how, embedded, upstream = made.status, made.embedded, made.wheel.name
    if made.team:   # published pinned and tagged already, its pins checked as they are
        wheel, checks, floor = made.wheel, made.checks, made.floor
    else:   # what it was built against (a torch probe: seconds; the heartbeat says so)
        with BuildProgress(pkg.name, console, "writing its pins into the wheel",
                           shared=ctx.progress):
            wheel, checks, floor = _pinned(ctx, pkg, made.wheel, made.checks,
                                           compiled=how is Status.COMPILED)
    seconds = round(time.monotonic() - started, 1)
    recipe = pkg.recipe
    entry = Entry(   # the wheel's file name, version and digest: the wheelhouse reads them
        package=recipe.name, status=how, upstream_wheel=upstream,
        requires=wheel_requirements(wheel),
        source=(f"team {made.team}: {upstream}" if made.team else
                describe_sources(recipe) if how is Status.COMPILED else
                " ".join(recipe.prebuilt)),
        arches_requested=pkg.archs.torch(), arches_embedded=embedded,
        arch_policy=pkg.policy, checks=checks,
        kernels=pkg.kernels if how is Status.COMPILED else "", torch=ctx.plan.combo.torch,
        python=ctx.plan.combo.python, cuda=str(ctx.combo_env.toolkit.version),
        build_seconds=seconds, log=str(log),
        reason="; ".join(filter(None, (made.note, recipe.arches.explain(ctx.plan.combo.arches,
                                                                        pkg.policy)))),
        recipe_digest=dict(pkg.inputs)["recipe"], plan_key=pkg.key,   # as planned
        compiler_cache=ctx.state.cache_reports[pkg.name].as_dict()
        if how is Status.COMPILED else {},
        runtime_installed=ctx.state.runtime.get(upstream, []),   # keyed before pinning
        cccl=ctx.combo_env.toolkit.cccl if how is Status.COMPILED else "",
        floor=floor.to_dict() if floor else {},
        patches=list(recipe.patches) if how is Status.COMPILED else [])
    if runner.stopping():   # interrupted while this thread verified: publish nothing
        raise BuildError(f"{recipe.name}: interrupted before it was published")
    entry = ctx.house.publish(wheel, entry)
    console.print(f"[green]{how}[/] {wheel.name} in {seconds:.1f} s "
                  f"(sass {' '.join(embedded.get('sass', [])) or '-'}; "
                  f"ptx {' '.join(embedded.get('ptx', [])) or '-'})")
    console.print(verdict_line(recipe.name, checks.values()))
    return entry


def _pinned(ctx: BuildContext, pkg: PackagePlan, wheel: Path, checks: dict[str, CheckResult],
            *, compiled: bool) -> tuple[Path, dict[str, CheckResult], Floor | None]:
    """The wheel with its torch, CUDA and wheelhouse pins written in and the platform tag its
    floor earns (cuforge.publish.rewrite), its checks with the ``pins`` verdict added, and
    that floor. A wheel compiled here is dated by its source's time (a prebuilt one keeps its
    dates)."""
    from cuforge.publish import rewrite
    epoch = sources.epoch_file(pkg.work / "src")
    out, result, floor = rewrite.for_wheelhouse(
        wheel, ctx.plan.wheel_dir, pkg.work / "pinned", accel=ctx.plan.combo.accel.tag,
        torch=torch_build(ctx), depends=pkg.recipe.depends,
        epoch=pep517.source_date_epoch(epoch) if compiled else None,
        variant=pkg.recipe.variant)
    return out, {**checks, result.check: result} if result else checks, floor


def torch_build(ctx: BuildContext) -> TorchBuild:
    """The env's torch as an index lists it (a probe of the env's Python: once per run)."""
    from cuforge.publish import rewrite
    if ctx.state.torch_dist is None:
        ctx.state.torch_dist = rewrite.torch_build(ctx.combo_env.python, ctx.combo_env.info.torch,
                                                   ctx.run_env)
    return ctx.state.torch_dist


@contextmanager
def timed_check(ctx: BuildContext) -> Iterator[None]:
    """Counts the time inside as a verification's (the summary's check seconds)."""
    started = time.monotonic()
    try:
        yield
    finally:
        ctx.state.check_spans.append((started, time.monotonic()))


def smoke(ctx: BuildContext, recipe) -> dict:
    """verify_wheel's smoke arguments: the recipe's script, or None and why (the flag the
    user gave, or the recipe's lack of one: the report said the latter for both)."""
    if ctx.req.skip_smoke:
        return {"smoke": None, "no_smoke": "--skip-smoke"}
    return {"smoke": smoke_script(ctx.project, recipe)}


def dependency_paths(pkg: PackagePlan) -> list[Path]:
    """Where verification imports the package's dependencies from: its overlays."""
    return builddeps.overlay_dirs(pkg.work, pkg.recipe.depends)


def verify(ctx: BuildContext, pkg: PackagePlan, wheel: Path, log: Path, *,
           say_failure: bool = True) -> tuple[dict[str, CheckResult], dict[str, list[str]]]:
    """The wheel's runtime requirements installed and every check run; its results and the
    arches it embeds, or a VerifyError naming the failed checks."""
    from cuforge.verify import verify_wheel   # the verification layer
    install_runtime_requirements(ctx, wheel, log)
    recipe = pkg.recipe
    archs = pkg.archs if recipe.arches.device_code and not (
        not recipe.kind.compiles and not recipe.arches.supported) else None
    with timed_check(ctx):
        report = verify_wheel(wheel, replace(ctx.checking, requested=archs), **smoke(ctx, recipe),
                              modules=list(recipe.modules),
                              dependency_paths=dependency_paths(pkg))
    log_report(log, report)
    if not report.ok:
        if say_failure:   # which checks, before the error
            console.print(verdict_line(recipe.name, report.results))
        bad = "; ".join(f"{r.check}: {r.detail}" for r in report.failures())
        raise VerifyError(f"{wheel.name} failed verification: {bad}",
                          hint=f"the wheel stays in {wheel.parent} for inspection; it was "
                          "not added to the wheelhouse")
    return report.checks, report.embedded


def install_runtime_requirements(ctx: BuildContext, wheel: Path, log: Path) -> None:
    """What the wheel needs from an index, installed into the env (one pip at a time)."""
    from cuforge.verify.runtimedeps import install_step, split
    from cuforge.verify.requirements import unmet
    reqs, _ = split(wheel_requirements(wheel), ctx.recipe_names)
    ctx.state.runtime[wheel.name] = reqs   # recorded in the manifest line
    if not reqs:   # torch and wheelhouse packages never come from an index (runtimedeps)
        return
    with ctx.env_lock:
        todo = unmet(ctx.combo_env.python, reqs, env=dict(ctx.run_env))
        if todo:
            run(install_step(ctx.combo_env.python, wheel.name, todo, ctx.combo_env.info.torch,
                             ctx.run_env), log=log)
        else:   # pip's resolver would only say so, in seconds (cuforge.verify.requirements)
            runner.note(log, f"runtime requirements of {wheel.name}: met already in "
                        f"{ctx.combo_env.python} ({', '.join(reqs)}); pip not run")


def describe_sources(recipe: Recipe) -> str:
    """The manifest's ``source``: the main source plus any extra ones (tetra's upstream tree)."""
    extra = "".join(f" {var}={src.describe()}" for var, src in recipe.extra_sources)
    return recipe.source.describe() + extra
