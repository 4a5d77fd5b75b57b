"""The executor: runs a build plan (``cuforge.pipeline.plan``), packages side by side under one
jobs budget, dependents after their dependencies. Each package ends as one manifest line:
compiled, prebuilt, skipped or FAILED. This module schedules; what one package's build does
is in ``actions`` (a handler per action kind), ``wheelsource`` (the team's wheel, a prebuilt
one, or one built here) and ``gate`` (verification, pins, the manifest entry, publish): plain
functions, each given the build's one ``context.BuildContext``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

from filelock import FileLock, Timeout
from rich.markup import escape
from rich.text import Text

from cuforge.config.checkout import with_checkout
from cuforge.config.combos import Combo
from cuforge.config.inputs import check_options
from cuforge.config.recipes import Recipe, selection
from cuforge.pipeline.request import BuildRequest
from cuforge.env.target import resolve
from cuforge.core import runner
from cuforge.core.console import (BuildProgress, duration, heartbeat, live_progress,
                                  make_console, progress_lines, timed)
from cuforge.core.errors import CuforgeError
from cuforge.core.project import Project
from cuforge.env import venv
from cuforge.env.resolve import check_combo_env
from cuforge.pipeline import gate, slots, wheelsource
from cuforge.pipeline.context import BuildContext, open_context
from cuforge.pipeline.plan import PackagePlan, Plan, make_plan, up_to_date
from cuforge.publish.wheelhouse import Entry, Status, Wheelhouse
from cuforge.publish.writable import check_wheelhouse

console = make_console(stderr=True)


@dataclass
class BuildOutcome:
    """What a build did: one manifest entry per package it decided."""

    entries: list[Entry] = field(default_factory=list)
    check_seconds: float = 0.0   # wall time with some wheel being checked (side by side once)

    @property
    def failed(self) -> list[Entry]:
        return [e for e in self.entries if e.status is Status.FAILED]


def check_build(project: Project, req: BuildRequest) -> None:
    """Everything of a ``build`` request that can be refused before anything is written,
    cheapest first: the same for ``--dry-run`` (the options, then the wheelhouse and the env,
    each asked in its own layer)."""
    check_options(req.jobs, req.src_overrides, req.team_wheels)
    check_wheelhouse(project, req.combo)
    check_combo_env(project.state_dir, req.combo, req.target)


def build(project: Project, req: BuildRequest,
          on_report: Callable[[dict], None] | None = None) -> BuildOutcome:
    """Build (or, with ``dry_run``, print the plan of) ``req``. ``on_report`` gets the build as
    data when it ends, also when a failure stopped it (``--json``: docs/json.md)."""
    report = on_report or (lambda _: None)
    # decided once (dry runs too: no cross-platform plan unless emulation was asked for)
    if req.target is None:
        req = replace(req, target=resolve(project, req.combo))
    recipes, order = selection(project, list(req.packages or req.combo.packages),
                               req.src_overrides)
    order = with_checkout(order, req.checkout, keep=(n for n, _ in req.src_overrides))
    check_build(project, req)   # what the dry run refuses too, before anything is written
    log_dir = project.state_dir / "logs" / req.combo.env_id   # the env's, the packages', sccache's
    if req.dry_run:
        from cuforge.pipeline.dryrun import dry_run
        report(dry_run(project, req, order, log_dir))
        return BuildOutcome()
    log_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    preparing = f"{req.combo.id}: preparing the environment (log: {log_dir / 'env.log'})"
    with timed(lambda: preparing,
               spinner=f"[bold]{escape(req.combo.id)}[/]: preparing the environment"):
        combo_env = venv.prepare(project.state_dir, req.combo, req.target,
                                 log=log_dir / "env.log", verbose=req.verbose,
                                 interpreter=req.interpreter)
    combo = combo_env.combo   # an interpreter's own torch decides (venv): so does the dry run's
    how = "reused" if combo_env.reused else "created"
    console.print(f"[bold]{combo.id}[/]: env {how} in {time.monotonic() - t0:.1f} s "
                  f"(torch {combo_env.info.torch_full}, CUDA {combo_env.toolkit.version} at "
                  f"{combo_env.toolkit.root})")
    with timed(lambda: f"{combo.id}: planning"):
        build_plan = make_plan(project, req, combo_env, order, log_dir=log_dir)
    executor = Executor(project, req, combo_env, build_plan, log_dir, frozenset(recipes))
    try:
        with slots.pool(project.state_dir, build_plan.jobs) if build_plan.pooled else nullcontext():
            outcome = executor.run()
        if req.upstream_tests:
            from cuforge.pipeline.upstream_stage import upstream_stage
            upstream_stage(project, combo_env, build_plan.wheel_dir, outcome.entries,
                           {r.name: r for r in order}, dict(req.src_overrides), console)
        if req.stress:
            _stress(project, combo_env, build_plan.wheel_dir, outcome.entries, order)
        if req.sanitize:
            _stress(project, combo_env, build_plan.wheel_dir, outcome.entries, order, sanitize=True)
    except CuforgeError:   # a failed package stopped the build: the summary still counts
        _print_results(executor, log_dir, time.monotonic() - t0)
        report(build_report(executor, log_dir, time.monotonic() - t0))
        raise
    _print_results(executor, log_dir, time.monotonic() - t0)
    report(build_report(executor, log_dir, time.monotonic() - t0))
    return outcome


def _print_results(executor: Executor, log_dir: Path, seconds: float) -> None:
    """The results table on stdout (kept by -q), then the summary line on stderr."""
    from cuforge.pipeline.results import results_table
    plan = executor.plan
    make_console().print(results_table(f"cuforge build {plan.combo.id}",
                                       [p.name for p in plan.packages], executor.results,
                                       executor.current, plan.wheel_dir))
    console.print(summary_line(executor, log_dir, seconds), soft_wrap=True)


def _stress(project: Project, combo_env: venv.ComboEnv, wheel_dir: Path, entries, order, *,
            sanitize: bool = False) -> None:
    """The stress stage (``--stress``; ``--sanitize``: short, under memcheck); a failed stress
    fails the build as a failed check does (exit 7)."""
    from cuforge.core.errors import VerifyError
    from cuforge.pipeline.stress_stage import stress_stage
    results = stress_stage(project, combo_env, wheel_dir, entries, {r.name: r for r in order},
                           console, sanitize=sanitize)
    failed = [r for r in results if r.failed]
    if failed:
        raise VerifyError(f"{len(failed)} stress run(s) failed: "
                          + "; ".join(r.summary for r in failed),
                          hint="the wheel is published but gave wrong results or faulted under "
                          "repetition: see docs/troubleshooting.md (spconv: SPCONV_DO_SORT=0, "
                          "ConvAlgo.Native)")


def _result(executor: Executor, name: str) -> str:
    """What the build did to one package, in the summary's words."""
    entry = executor.results.get(name)
    return ("not started" if entry is None else "up to date" if name in executor.current
            else "failed" if entry.status is Status.FAILED else str(entry.status))


def build_report(executor: Executor, log_dir: Path, seconds: float) -> dict:
    """The build as data (``build --json``, docs/json.md): one row per package of the plan."""
    rows = []
    for pkg in executor.plan.packages:
        e = executor.results.get(pkg.name) or Entry(pkg.name, Status.SKIPPED)
        rows.append({"name": pkg.name, "result": _result(executor, pkg.name),
                     "version": e.version or None,
                     "wheel": str(executor.plan.wheel_dir / e.wheel) if e.wheel else None,
                     "seconds": e.build_seconds or None, "arches": pkg.archs.torch(),
                     "embedded": e.arches_embedded, "checks": e.checks,
                     "floor": e.floor or None,
                     "reason": e.reason or None, "log": e.log or None})
    return {"dry_run": False, "combo": executor.plan.combo.id, "torch": executor.plan.combo.torch,
            "wheel_dir": str(executor.plan.wheel_dir), "log_dir": str(log_dir),
            "seconds": round(seconds, 1), "packages": rows}


def summary_line(executor: Executor, log_dir: Path, seconds: float) -> Text:
    """The build's last line: what it did to each package, where the wheels and the logs are,
    how long it took."""
    counts: dict[str, int] = {}
    for pkg in executor.plan.packages:
        what = _result(executor, pkg.name)
        counts[what] = counts.get(what, 0) + 1
    order = ("compiled", "prebuilt", "up to date", "failed", "skipped", "not started")
    said = ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k)) or "nothing to build"
    line = Text()
    line.append(f"{executor.plan.combo.id}: ", style="bold")
    table = executor.plan.wheel_dir / "manifest.txt"   # named only where it was written
    line.append(f"{said} in {duration(seconds)}; wheelhouse {executor.plan.wheel_dir}"
                + (" (manifest.txt)" if table.is_file() else "") + f"; logs {log_dir}")
    return line


class Executor:
    """Runs a plan: a package starts once its dependencies are done and its share of the jobs
    budget is free (shares never add up to more than the budget); commands that change the
    combo env (pip install) run one at a time. What the packages share is ``ctx``."""

    def __init__(self, project: Project, req: BuildRequest, combo_env: venv.ComboEnv, plan: Plan,
                 log_dir: Path, recipe_names: frozenset[str]) -> None:
        self.ctx: BuildContext = open_context(project, req, combo_env, plan, log_dir, recipe_names,
                                              live_progress(console))
        self.plan = plan
        self.started = time.monotonic()
        self.results: dict[str, Entry] = {}   # per package, as run() decides them
        self.current: set[str] = set()         # packages found up to date

    def _between(self, results: dict[str, Entry]) -> str:
        """What the heartbeat says while no package shows a live line (a package's wheel is
        being published, the next one is starting): a beat is never skipped."""
        return (f"{self.plan.combo.id}: {len(results)} of {len(self.plan.packages)} packages "
                f"done ({duration(time.monotonic() - self.started)})")

    def _beat(self, progress, results: dict[str, Entry]) -> list[str]:
        """The heartbeat's lines: each running package's, with how many packages are done."""
        count = f"; {len(results)}/{len(self.plan.packages)} packages done"
        return [line + count for line in progress_lines(progress)] or [self._between(results)]

    def run(self) -> BuildOutcome:
        outcome = BuildOutcome()
        results: dict[str, Entry] = {}
        pending = list(self.plan.packages)
        running: dict[Future, PackagePlan] = {}
        free = self.plan.jobs
        stop: CuforgeError | None = None
        self.results = results   # read by summary_line, also after a failure
        # the runner's session innermost: an interrupt stops the commands before the pool
        # waits for the threads that run them
        ctx = self.ctx
        with ctx.progress as progress, \
                heartbeat(console, lambda: self._beat(progress, results)), \
                ThreadPoolExecutor(max(1, self.plan.jobs)) as pool, runner.session(), \
                self._check_host():
            if ctx.req.team_wheels:
                self._team_ahead(pool, pending)
            while (pending and stop is None) or running:
                for pkg in list(pending if stop is None else ()):
                    deps = [d for d in pkg.recipe.depends if d in _names(self.plan)]
                    broken = [d for d in deps if d in results
                              and results[d].status in (Status.FAILED, Status.SKIPPED)]
                    if broken:
                        pending.remove(pkg)
                        results[pkg.name] = _record(
                            ctx.house, self.plan.combo, pkg.recipe, Status.SKIPPED,
                            f"dependency {', '.join(broken)} failed")
                        continue
                    if any(d not in results for d in deps):
                        continue
                    current = None if ctx.req.rebuild else up_to_date(ctx.house, pkg)
                    if current is not None:
                        pending.remove(pkg)
                        results[pkg.name] = current
                        self.current.add(pkg.name)
                        console.print(f"[green]up to date[/] {current.wheel} (same recipe, "
                                      "patches, sources, arches and torch; --rebuild to "
                                      "build again)")
                        continue
                    if pkg.jobs > free and running and not self.plan.pooled:
                        continue   # pooled: the compile slots hold the budget instead
                    pending.remove(pkg)
                    free -= pkg.jobs
                    running[pool.submit(self._package, pkg)] = pkg
                if not running:
                    continue
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    pkg = running.pop(fut)
                    free += pkg.jobs
                    try:
                        results[pkg.name] = fut.result()
                    except CuforgeError as err:   # not --keep-going: stop after the others
                        stop = stop or err
                        results[pkg.name] = Entry(pkg.name, Status.FAILED,
                                                  reason=str(err).splitlines()[0])
        outcome.entries = [results[p.name] for p in self.plan.packages if p.name in results]
        outcome.check_seconds = covered(ctx.state.check_spans)
        if stop is not None:
            raise stop   # printed once, by the CLI
        return outcome

    def _team_ahead(self, pool: ThreadPoolExecutor, pending: list[PackagePlan]) -> None:
        """``--wheels``: every team wheel still to decide is checked at once, side by side,
        each against its dependencies' team wheels; the loop then publishes them in order and
        takes a result only where the dependencies match (``wheelsource._try_team``)."""
        ctx = self.ctx
        todo = [p for p in pending if ctx.req.rebuild or up_to_date(ctx.house, p) is None]
        futures = {p.name: pool.submit(self._ahead_in_work_dir, p) for p in todo}
        ctx.state.ahead.update((name, got) for name, f in futures.items()
                               if (got := f.result()))

    def _ahead_in_work_dir(self, pkg: PackagePlan):
        with work_lock(pkg.work, lambda text: console.print(escape(text))) as lock, \
                runner.hold(lock) if lock is not None else nullcontext(), \
                BuildProgress(pkg.name, console, "checking the team's wheel",
                              shared=self.ctx.progress):
            return wheelsource.check_ahead(self.ctx, pkg)

    def _check_host(self):
        """The checks of every wheel of this run share one interpreter of the env (each check
        a child of it): torch is imported once per run, not three times per wheel."""
        from cuforge.verify import check_host
        combo_env = self.ctx.combo_env
        return check_host.serving(combo_env.info.python, self.ctx.run_env,
                                  enabled=not combo_env.target.emulated)

    def _package(self, pkg: PackagePlan) -> Entry:
        if pkg.skip:
            console.print(f"[yellow]skipped[/] {pkg.name}: {pkg.skip}")
            return _record(self.ctx.house, self.plan.combo, pkg.recipe, Status.SKIPPED,
                           pkg.skip)
        # the work dir is ours from fetch to publish (the wheel is copied out of it)
        with work_lock(pkg.work, lambda text: console.print(escape(text))) as lock:
            return self._build_and_publish(pkg, lock)

    def _build_and_publish(self, pkg: PackagePlan, lock: int | None) -> Entry:
        """A verified wheel from one of its sources (``wheelsource``), its commands holding the
        work dir's ``lock``, published by the gate; a failure is its one FAILED line (the
        build stops after the others, unless --keep-going)."""
        ctx = self.ctx
        log = ctx.log_dir / f"{pkg.name}.log"
        started = time.monotonic()
        last = ctx.house.last_build(pkg.name)   # read before this build adds its own line
        try:
            with BuildProgress(pkg.name, console, f"building for {pkg.archs} (log: {log})",
                               shared=ctx.progress,
                               last=last.build_seconds if last else None) as progress, \
                    runner.package_commands(log, holding=lock, on_line=progress.on_line,
                                            notes=[pkg.jobs_note]):
                progress.announce()
                made = wheelsource.wheel_for(ctx, pkg, log, progress.say)
        except CuforgeError as err:   # an interrupt's is not one (package_commands)
            entry = _record(ctx.house, self.plan.combo, pkg.recipe, Status.FAILED, str(err),
                            log=str(log), build_seconds=round(time.monotonic() - started, 1))
            if not ctx.req.keep_going:
                raise
            console.print(f"[red]FAILED[/] {escape(pkg.name)}: {escape(str(err))}")
            return entry
        return gate.publish(ctx, pkg, made, log, started)


def covered(spans: list[tuple[float, float]]) -> float:
    """Seconds in which at least one span runs (checks side by side count once).

    >>> covered([(0, 4), (2, 6), (10, 11)])
    7.0
    """
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _names(plan: Plan) -> set[str]:
    return {p.name for p in plan.packages}


@contextmanager
def work_lock(work: Path, say) -> Iterator[int | None]:
    """One build at a time in a package's work dir: two cuforge runs, or two clones sharing a
    ``build_dir``, wait for each other instead of compiling into the same tree. Yields the
    lock's file descriptor (None where filelock does not say it), for the commands run in the
    dir to hold (``runner.package_commands``, ``runner.hold``)."""
    work.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(work) + ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say(f"waiting for another build in {work} (or for the compilers of a killed one to "
            "end)")
        lock.acquire()
    try:
        # every command's supervisor keeps the lock's file open: after a kill of cuforge the
        # lock lasts until its last compiler is gone, so a new build never runs beside them
        yield getattr(getattr(lock, "_context", None), "lock_file_fd", None)
    finally:
        lock.release()


def _record(house: Wheelhouse, combo: Combo, recipe: Recipe, status: Status, reason: str,
            **more) -> Entry:
    """A package without a wheel this time, published as its one manifest line: skipped, or
    FAILED (``more``: its log and time), and why (the first line of it)."""
    return house.publish(None, Entry(package=recipe.name, status=status,
                                     reason=reason.splitlines()[0] if reason else "",
                                     source=recipe.source.describe(), torch=combo.torch,
                                     python=combo.python, arches_requested=combo.arches.torch(),
                                     **more))
