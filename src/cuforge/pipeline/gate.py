"""The verification gate and what is published: a wheel is installed with its runtime
requirements and verified (``cuforge.verify``) before anything is published; a verified wheel
gets its pins written in (``publish.wheelmeta``), its manifest entry (how it came to be, its
checks, the arches it embeds, the plan's key) and is published; a failure is recorded as one
``FAILED`` line."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.markup import escape

from cuforge.config.combos import Combo
from cuforge.config.recipes import Recipe
from cuforge.pipeline.request import BuildRequest
from cuforge.core import runner
from cuforge.core.console import BuildProgress, make_console
from cuforge.core.digest import sha256_of
from cuforge.core.errors import BuildError, CuforgeError, VerifyError
from cuforge.core.project import Project
from cuforge.core.runner import listen, run
from cuforge.env import builddeps, cccl, venv
from cuforge.pipeline import compiler_cache, sources
from cuforge.pipeline.builders import pep517
from cuforge.pipeline.plan import PackagePlan, Plan
from cuforge.publish.wheelhouse import Entry, Status, Wheelhouse
from cuforge.publish.wheelmeta import wheel_requirements
from cuforge.verify.checks import embedded_arches, log_report, smoke_script
from cuforge.verify.report import CheckResult, verdict_line

console = make_console(stderr=True)


class Gate:
    """The executor's verification and publishing of one package's wheel (mixed into
    ``executor.Executor``, which sets the attributes below)."""

    project: Project
    req: BuildRequest
    env: venv.ComboEnv
    plan: Plan
    run_env: tuple[tuple[str, str], ...]
    house: Wheelhouse
    env_lock: threading.Lock
    recipe_names: frozenset[str]
    runtime: dict[str, list[str]]
    cache_reports: dict[str, compiler_cache.CacheReport]
    check_spans: list[tuple[float, float]]
    progress: object
    _torch_dist: object

    def _build_and_publish(self, pkg: PackagePlan) -> Entry:
        log = self.log_dir / f"{pkg.name}.log"
        log.write_text("")
        if pkg.jobs_note:
            runner.note(log, pkg.jobs_note)
        started = time.monotonic()
        last = self.house.last_build(pkg.name)   # read before this build adds its own line
        try:
            with BuildProgress(pkg.name, console, f"building for {pkg.archs} (log: {log})",
                               shared=self.progress,
                               last=last.build_seconds if last else None) as progress, \
                    listen(progress.on_line):
                progress.announce()
                made = self._wheel_for(pkg, log, progress.say)
        except CuforgeError as err:
            if runner.stopping():   # a command stopped by the interrupt: no verdict to record
                raise runner.Interrupted(f"{pkg.name} was not finished") from err
            entry = self.house.publish(None, _failed_entry(self.plan.combo, pkg.recipe, str(err),
                                                           log, started))
            if not self.req.keep_going:
                raise
            console.print(f"[red]FAILED[/] {escape(pkg.name)}: {escape(str(err))}")
            return entry
        how, embedded, upstream = made.status, made.embedded, made.wheel.name
        if made.team:   # published pinned already, and its pins checked as they are (_try_team)
            wheel, checks = made.wheel, made.checks
        else:   # what it was built against (a torch probe: seconds; the heartbeat says so)
            with BuildProgress(pkg.name, console, "writing its pins into the wheel",
                               shared=self.progress):
                wheel, checks = self._pinned(pkg, made.wheel, made.checks,
                                             compiled=how is Status.COMPILED)
        seconds = round(time.monotonic() - started, 1)
        recipe = pkg.recipe
        entry = Entry(
            package=recipe.name, status=how, version=_wheel_version(wheel),
            upstream_wheel=upstream, requires=wheel_requirements(wheel),
            wheel=wheel.name, wheel_sha256=sha256_of(wheel),
            source=(f"team {made.team}: {upstream}" if made.team else
                    describe_sources(recipe) if how is Status.COMPILED else
                    " ".join(recipe.prebuilt)),
            arches_requested=pkg.archs.torch(), arches_embedded=embedded,
            arch_policy=pkg.policy, checks=checks,
            kernels=pkg.kernels if how is Status.COMPILED else "", torch=self.plan.combo.torch,
            python=self.plan.combo.python, cuda=str(self.env.toolkit.version),
            build_seconds=seconds, log=str(log),
            reason="; ".join(filter(None, (made.note, recipe.arches.explain(self.plan.combo.arches,
                                                                       pkg.policy)))),
            recipe_digest=dict(pkg.inputs)["recipe"], plan_key=pkg.key,   # as planned
            compiler_cache=self.cache_reports[pkg.name].as_dict() if how is Status.COMPILED else {},
            runtime_installed=self.runtime.get(upstream, []),   # keyed before pinning
            cccl=cccl.version_in([*self.env.toolkit.include_dirs, *self.env.info.nvidia_include])
            if how is Status.COMPILED else "")
        if runner.stopping():   # interrupted while this thread verified: publish nothing
            raise BuildError(f"{recipe.name}: interrupted before it was published")
        self.house.publish(wheel, entry)
        console.print(f"[green]{how}[/] {wheel.name} in {seconds:.1f} s "
                      f"(sass {' '.join(embedded.get('sass', [])) or '-'}; "
                      f"ptx {' '.join(embedded.get('ptx', [])) or '-'})")
        console.print(verdict_line(recipe.name, checks.values()))
        return entry

    def _pinned(self, pkg: PackagePlan, wheel: Path, checks: dict[str, CheckResult], *,
                compiled: bool) -> tuple[Path, dict[str, CheckResult]]:
        """The wheel with its torch, CUDA and wheelhouse pins written in
        (cuforge.publish.rewrite), and its checks with the ``pins`` verdict added. A wheel
        compiled here is dated by its source's time (a prebuilt one keeps its dates)."""
        from cuforge.publish import rewrite
        epoch = sources.epoch_file(pkg.work / "src")
        out, result = rewrite.for_wheelhouse(
            wheel, self.plan.wheel_dir, pkg.work / "pinned", accel=self.plan.combo.accel.tag,
            torch=self._torch_build(), depends=pkg.recipe.depends,
            epoch=pep517.source_date_epoch(epoch) if compiled else None)
        return out, {**checks, result.check: result} if result else checks

    def _torch_build(self):
        from cuforge.publish import rewrite
        if self._torch_dist is None:
            self._torch_dist = rewrite.torch_build(self.env.python, self.env.info.torch,
                                                   self.run_env)
        return self._torch_dist

    @contextmanager
    def _timed_check(self) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.check_spans.append((started, time.monotonic()))

    def _smoke(self, recipe) -> dict:
        """verify_wheel's smoke arguments: the recipe's script, or None and why (the flag the
        user gave, or the recipe's lack of one: the report said the latter for both)."""
        if self.req.skip_smoke:
            return {"smoke": None, "no_smoke": "--skip-smoke"}
        return {"smoke": smoke_script(self.project, recipe)}

    def _dependency_paths(self, pkg: PackagePlan) -> list[Path]:
        """Where verification imports the package's dependencies from: its overlays."""
        return builddeps.overlay_dirs(pkg.work, pkg.recipe.depends)

    def _verify(self, pkg: PackagePlan, wheel: Path, log: Path, *, say_failure: bool = True
                ) -> tuple[dict[str, CheckResult], dict[str, list[str]]]:
        from cuforge.verify import context_from, verify_wheel   # the verification layer
        self._install_runtime_requirements(wheel, log)
        recipe = pkg.recipe
        archs = pkg.archs if recipe.arches.device_code and not (
            not recipe.kind.compiles and not recipe.arches.supported) else None
        ctx = context_from(self.env.info, archs, self.run_env,
                           no_device=self.env.target.no_device, sysroot=self.env.target.sysroot)
        with self._timed_check():
            report = verify_wheel(wheel, ctx, **self._smoke(recipe), modules=list(recipe.modules),
                                  dependency_paths=self._dependency_paths(pkg))
        log_report(log, report)
        if not report.ok:
            if say_failure:   # which checks, before the error
                console.print(verdict_line(recipe.name, report.results))
            bad = "; ".join(f"{r.check}: {r.detail}" for r in report.failures())
            raise VerifyError(f"{wheel.name} failed verification: {bad}",
                              hint=f"the wheel stays in {wheel.parent} for inspection; it was "
                              "not added to the wheelhouse")
        return report.checks, embedded_arches(wheel)

    def _install_runtime_requirements(self, wheel: Path, log: Path) -> None:
        from cuforge.verify.runtimedeps import install_step, split
        from cuforge.verify.requirements import unmet
        reqs, _ = split(wheel_requirements(wheel), self.recipe_names)
        self.runtime[wheel.name] = reqs   # recorded in the manifest line
        if not reqs:   # torch and wheelhouse packages never come from an index (runtimedeps)
            return
        with self.env_lock:
            todo = unmet(self.env.python, reqs, env=dict(self.run_env))
            if todo:
                run(install_step(self.env.python, wheel.name, todo, self.env.info.torch,
                                 self.run_env), log=log)
            else:   # pip's resolver would only say so, in seconds (cuforge.verify.requirements)
                runner.note(log, f"runtime requirements of {wheel.name}: met already in "
                                 f"{self.env.python} ({', '.join(reqs)}); pip not run")


def describe_sources(recipe: Recipe) -> str:
    """The manifest's ``source``: the main source plus any extra ones (tetra's upstream tree)."""
    extra = "".join(f" {var}={src.describe()}" for var, src in recipe.extra_sources)
    return recipe.source.describe() + extra


def _wheel_version(wheel: Path) -> str:
    parts = wheel.name.split("-")
    return parts[1] if len(parts) > 1 else ""


def _failed_entry(combo: Combo, recipe: Recipe, reason: str, log: Path, started: float) -> Entry:
    return Entry(package=recipe.name, status=Status.FAILED, reason=reason.splitlines()[0],
                 source=recipe.source.describe(), torch=combo.torch, python=combo.python,
                 arches_requested=combo.arches.torch(), log=str(log),
                 build_seconds=round(time.monotonic() - started, 1))
