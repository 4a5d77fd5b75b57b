"""The executor: runs a build plan (``cuforge.pipeline.plan``) - per package: fetch, patch, compile,
verify, publish - packages side by side under one jobs budget, dependents after their
dependencies. Each package ends as one manifest line: compiled, prebuilt, skipped or FAILED."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

from filelock import FileLock, Timeout
from rich.markup import escape
from rich.text import Text

from cuforge.pipeline import compiler_cache, slots, sources
from cuforge.core import faults, runner
from cuforge.env import syslibs, venv
from cuforge.pipeline.builders import cmake_seed
from cuforge.env import builddeps
from cuforge.verify.checks import check_summaries, embedded_arches, log_report, smoke_script
from cuforge.config.combos import Combo
from cuforge.core.digest import sha256_of
from cuforge.core.console import (BuildProgress, duration, heartbeat, live_progress, make_console,
                                  progress_lines, verdict_line)
from cuforge.core.errors import BuildError, CuforgeError, VerifyError
from cuforge.config.inputs import check_build
from cuforge.pipeline.plan import (Action, ActionKind, PackagePlan, Plan, make_plan, own_modules,
                                   up_to_date)
from cuforge.core.project import Project
from cuforge.config.recipes import Recipe, selection
from cuforge.config.request import BuildRequest
from cuforge.core.runner import Step, listen, run
from cuforge.config.target import resolve
from cuforge.publish.wheelhouse import Entry, Status, Wheelhouse
from cuforge.publish.wheelmeta import wheel_requirements

console = make_console(stderr=True)


@dataclass(frozen=True)
class Made:
    """A verified wheel, before it is pinned and published: how it came to be, its checks'
    summaries, the arches it really embeds, and a note for the manifest's reason."""

    wheel: Path
    status: Status             # compiled, or prebuilt (downloaded, or a prebuilt recipe)
    checks: dict[str, str]
    embedded: dict[str, list[str]]
    note: str = ""             # e.g. why the published wheel was not used
    team: str = ""             # the team index it came from (--wheels): published as it is


@dataclass
class Outcome:
    entries: list[Entry] = field(default_factory=list)
    check_seconds: float = 0.0   # wall time with some wheel being checked (side by side once)

    @property
    def failed(self) -> list[Entry]:
        return [e for e in self.entries if e.status is Status.FAILED]


def build(project: Project, req: BuildRequest) -> Outcome:
    # decided once (dry runs too: no cross-platform plan unless emulation was asked for)
    if req.target is None:
        req = replace(req, target=resolve(project, req.combo))
    recipes, order = selection(project, list(req.packages or req.combo.packages),
                               req.src_overrides)
    check_build(project, req)   # what the dry run refuses too, before anything is written
    if req.dry_run:
        from cuforge.pipeline.dryrun import dry_run
        dry_run(project, req, order)
        return Outcome()
    log_dir = project.state_dir / "logs" / req.combo.env_id
    log_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    preparing = f"{req.combo.id}: preparing the environment (log: {log_dir / 'env.log'})"
    with console.status(f"[bold]{escape(req.combo.id)}[/]: preparing the environment"), \
            heartbeat(console, lambda: [f"{preparing}, {duration(time.monotonic() - t0)}"]):
        env = venv.prepare(project.state_dir, req.combo, req.target, log=log_dir / "env.log",
                           verbose=req.verbose)
    combo = env.combo   # an interpreter's own torch decides (venv): so does the dry run's
    how = "reused" if env.reused else "created"
    console.print(f"[bold]{combo.id}[/]: env {how} in {time.monotonic() - t0:.1f} s "
                  f"(torch {env.info.torch_full}, CUDA {env.toolkit.version} at "
                  f"{env.toolkit.root})")
    with heartbeat(console, lambda: [f"{combo.id}: planning "
                                     f"({duration(time.monotonic() - t0)})"]):
        build_plan = make_plan(project, req, env, order)
    executor = Executor(project, req, env, build_plan, log_dir, frozenset(recipes))
    try:
        with slots.pool(project.state_dir, build_plan.jobs) if build_plan.pooled else nullcontext():
            outcome = executor.run()
        if req.upstream_tests:
            from cuforge.pipeline.upstream_stage import upstream_stage
            upstream_stage(project, env, build_plan.wheel_dir, outcome.entries,
                           {r.name: r for r in order}, dict(req.src_overrides), console)
    except CuforgeError:   # a failed package stopped the build: the summary still counts
        console.print(summary_line(executor, log_dir, time.monotonic() - t0), soft_wrap=True)
        raise
    console.print(summary_line(executor, log_dir, time.monotonic() - t0), soft_wrap=True)
    return outcome


def summary_line(executor: Executor, log_dir: Path, seconds: float) -> Text:
    """The build's last line: what it did to each package, where the wheels and the logs are,
    how long it took."""
    counts: dict[str, int] = {}
    for pkg in executor.plan.packages:
        entry = executor.results.get(pkg.name)
        what = ("not started" if entry is None else "up to date" if pkg.name in executor.current
                else "failed" if entry.status is Status.FAILED else str(entry.status))
        counts[what] = counts.get(what, 0) + 1
    order = ("compiled", "prebuilt", "up to date", "failed", "skipped", "not started")
    said = ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k)) or "nothing to build"
    line = Text()
    line.append(f"{executor.plan.combo.id}: ", style="bold")
    line.append(f"{said} in {duration(seconds)}; wheelhouse {executor.plan.wheel_dir} "
                f"(manifest.txt); logs {log_dir}")
    return line


class Executor:
    """Runs a plan: a package starts once its dependencies are done and its share of the jobs
    budget is free (shares never add up to more than the budget); commands that change the
    combo env (pip install) run one at a time."""

    def __init__(self, project: Project, req: BuildRequest, env: venv.ComboEnv, plan: Plan,
                 log_dir: Path, recipe_names: frozenset[str]) -> None:
        self.project, self.req, self.env, self.plan, self.log_dir = (project, req, env, plan,
                                                                     log_dir)
        self.recipe_names = recipe_names   # never installed from an index (runtimedeps.split)
        self.run_env = env.target.step_env()   # what the env's Python needs to run (emulation)
        self.house = Wheelhouse(plan.wheel_dir)
        self.house.recover()   # finish or undo a publish that a killed run left half-done
        self.runtime: dict[str, list[str]] = {}   # wheel -> the requirements verify installed
        self.env_lock = threading.Lock()
        self.cache_reports: dict[str, compiler_cache.CacheReport] = {}
        self._team: list | None = None   # the team index's wheels (--wheels), read once
        self._torch_dist = None   # the env's torch as an index lists it (wheelmeta.TorchBuild)
        self.started = time.monotonic()
        self.side_by_side = plan.pooled or sum(1 for p in plan.packages
                                               if p.jobs < plan.jobs) > 1
        self.results: dict[str, Entry] = {}   # per package, as run() decides them
        self.current: set[str] = set()         # packages found up to date
        self.check_spans: list[tuple[float, float]] = []   # (start, end) of each verification

    def _between(self, results: dict[str, Entry]) -> str:
        """What the heartbeat says while no package shows a live line (a package's wheel is
        being published, the next one is starting): a beat is never skipped."""
        return (f"{self.plan.combo.id}: {len(results)} of {len(self.plan.packages)} packages "
                f"done ({duration(time.monotonic() - self.started)})")

    def run(self) -> Outcome:
        outcome = Outcome()
        results: dict[str, Entry] = {}
        pending = list(self.plan.packages)
        running: dict[Future, PackagePlan] = {}
        free = self.plan.jobs
        stop: CuforgeError | None = None
        self.results = results   # read by summary_line, also after a failure
        # the runner's session innermost: an interrupt stops the commands before the pool
        # waits for the threads that run them
        with live_progress(console) as progress, \
                heartbeat(console, lambda: progress_lines(progress) or [self._between(results)]), \
                ThreadPoolExecutor(max(1, self.plan.jobs)) as pool, runner.session(), \
                self._check_host():
            self.progress = progress
            while (pending and stop is None) or running:
                for pkg in list(pending if stop is None else ()):
                    deps = [d for d in pkg.recipe.depends if d in _names(self.plan)]
                    broken = [d for d in deps if d in results
                              and results[d].status in (Status.FAILED, Status.SKIPPED)]
                    if broken:
                        pending.remove(pkg)
                        results[pkg.name] = _record_skip(
                            self.house, self.plan.combo, pkg.recipe,
                            f"dependency {', '.join(broken)} failed")
                        continue
                    if any(d not in results for d in deps):
                        continue
                    current = None if self.req.rebuild else up_to_date(self.house, pkg)
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
                        results[pkg.name] = Entry(pkg.name, Status.FAILED)
        outcome.entries = [results[p.name] for p in self.plan.packages if p.name in results]
        outcome.check_seconds = covered(self.check_spans)
        if stop is not None:
            raise stop   # printed once, by the CLI
        return outcome

    def _check_host(self):
        """The checks of every wheel of this run share one interpreter of the env (each check
        a child of it): torch is imported once per run, not three times per wheel."""
        from cuforge.verify import host
        return host.serving(self.env.info.python, self.run_env,
                            enabled=not self.env.target.emulated)

    @contextmanager
    def _timed_check(self) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.check_spans.append((started, time.monotonic()))

    def _package(self, pkg: PackagePlan) -> Entry:
        if pkg.skip:
            console.print(f"[yellow]skipped[/] {pkg.name}: {pkg.skip}")
            return _record_skip(self.house, self.plan.combo, pkg.recipe, pkg.skip)
        # the work dir is ours from fetch to publish (the wheel is copied out of it)
        with work_lock(pkg.work, lambda text: console.print(escape(text))):
            return self._build_and_publish(pkg)

    def _build_and_publish(self, pkg: PackagePlan) -> Entry:
        log = self.log_dir / f"{pkg.name}.log"
        log.write_text("")
        if pkg.jobs_note:
            runner.note(log, pkg.jobs_note)
        started = time.monotonic()
        try:
            with BuildProgress(pkg.name, console, f"building for {pkg.archs} (log: {log})",
                               shared=self.progress) as progress, listen(progress.on_line):
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
                wheel, checks = self._pinned(pkg, made.wheel, made.checks)
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
            arch_policy=pkg.policy, checks=checks, torch=self.plan.combo.torch,
            python=self.plan.combo.python, cuda=str(self.env.toolkit.version),
            build_seconds=seconds, log=str(log),
            reason="; ".join(filter(None, (made.note, recipe.arches.explain(self.plan.combo.arches,
                                                                       pkg.policy)))),
            recipe_digest=dict(pkg.inputs)["recipe"], plan_key=pkg.key,   # as planned
            compiler_cache=self.cache_reports[pkg.name].as_dict() if how is Status.COMPILED else {},
            runtime_installed=self.runtime.get(upstream, []))   # keyed before pinning
        if runner.stopping():   # interrupted while this thread verified: publish nothing
            raise BuildError(f"{recipe.name}: interrupted before it was published")
        self.house.publish(wheel, entry)
        console.print(f"[green]{how}[/] {wheel.name} in {seconds:.1f} s "
                      f"(sass {' '.join(embedded.get('sass', [])) or '-'}; "
                      f"ptx {' '.join(embedded.get('ptx', [])) or '-'})")
        console.print(verdict_line(recipe.name, checks))
        return entry

    def _pinned(self, pkg: PackagePlan, wheel: Path, checks: dict[str, str]
                ) -> tuple[Path, dict[str, str]]:
        """The wheel with its torch, CUDA and wheelhouse pins written in (cuforge.publish.wheelmeta),
        and its checks with the ``pins`` verdict added."""
        from cuforge.publish import wheelmeta
        out, result = wheelmeta.for_wheelhouse(
            wheel, self.plan.wheel_dir, pkg.work / "pinned", accel=self.plan.combo.accel.tag,
            torch=self._torch_build(), depends=pkg.recipe.depends)
        return out, {**checks, "pins": f"pass: {result.detail}"} if result else checks

    def _torch_build(self):
        from cuforge.publish import wheelmeta
        if self._torch_dist is None:
            self._torch_dist = wheelmeta.torch_build(self.env.python, self.env.info.torch,
                                                     self.run_env)
        return self._torch_dist

    def _wheel_for(self, pkg: PackagePlan, log: Path, say) -> Made:
        """A verified wheel: the team's (--wheels), an accepted prebuilt one, or one compiled
        here."""
        note = ""
        if self.req.team_wheels:
            say("trying the team's wheel")
            got = self._try_team(pkg, log)
            if isinstance(got, Made):
                return got
            console.print(f"[yellow]{escape(pkg.name)}[/]: {escape(got)}; building it here")
        if pkg.prebuilt:
            say("trying the prebuilt wheel")
            got = self._try_prebuilt(pkg, log)
            if isinstance(got, Made):
                return got
            note = got
            console.print(f"[yellow]{escape(pkg.name)}[/]: {escape(note)}; compiling instead")
        since = compiler_cache.error_log_size(pkg.cache)
        try:
            self._build_from_source(pkg, pkg.cache, log, say)
        except BuildError:
            why = compiler_cache.failed_inside(pkg.cache, since)
            if not why:
                raise
            console.print(f"[yellow]warning[/]: {escape(pkg.name)}: sccache failed ({escape(why)});"
                          " building again without the compiler cache")
            self._build_from_source(replace(pkg, actions=_without_cache(pkg)), None, log, say,
                                    why_off=f"sccache failed ({why}); built without it")
        wheel = _single_wheel(pkg.work / "dist", pkg.recipe)
        say("verifying")
        checks, embedded = self._verify(pkg, wheel, log)
        how = Status.COMPILED if pkg.recipe.kind.compiles else Status.PREBUILT
        return Made(wheel, how, checks, embedded, note)

    def _build_from_source(self, pkg: PackagePlan, cache, log: Path, say, why_off: str = ""):
        """Every action before verification, under ``cache`` (None: no compiler cache)."""
        with compiler_cache.serve(cache, why_off or pkg.cache_off, log,
                                  say=console.print) as cached:
            self.cache_reports[pkg.name] = cached
            for action in pkg.actions:
                if action.kind is ActionKind.VERIFY:
                    break
                say(action.what)
                self._do(pkg, action, log)

    def _do(self, pkg: PackagePlan, action: Action, log: Path) -> None:
        """Carry out one action of the plan that is not a verification stage."""
        HANDLERS[action.kind](self, pkg, action, log)

    def _check(self, pkg: PackagePlan, action: Action, log: Path) -> None:
        syslibs.require_headers(pkg.recipe, self.env.target.sysroot)

    def _guard(self, pkg: PackagePlan, action: Action, log: Path) -> None:
        builddeps.require_not_installed(self.env.python, own_modules(pkg.recipe), pkg.name,
                                        self.run_env)

    def _clean(self, pkg: PackagePlan, action: Action, log: Path) -> None:
        shutil.rmtree(action.path, ignore_errors=True)
        action.path.mkdir(parents=True)

    def _fetch(self, pkg: PackagePlan, action: Action, log: Path) -> None:
        recipe = pkg.recipe
        if action.arg:   # an extra source, named by its variable
            source = dict(recipe.extra_sources)[action.arg]
        else:
            reset_build_dir(pkg.work, pkg.source_key)
            source = recipe.source
        sources.fetch(source, project_root=self.project.root,
                      cache_dir=self.project.state_dir / "cache", dest=action.path,
                      stamp=pkg.source_key)

    def _patch(self, pkg: PackagePlan, action: Action, log: Path) -> None:
        from cuforge import patching   # lazily: only recipes with patches need the engine
        patching.apply(patching.load_patch_set(action.arg, patches_dir=self.project.patches_dir),
                       action.path)

    def _deps(self, pkg: PackagePlan, action: Action | None, log: Path) -> None:
        for step in self._deps_steps(pkg, log):   # the package's own overlay: its lock only
            run(step, log=log, stream=self.req.verbose, prefix=self._prefix(pkg))

    def _seed(self, pkg: PackagePlan, action: Action, log: Path) -> None:
        if cmake_seed.restore(action.path, Path(action.arg)):
            runner.note(log, f"seeded CMake's compiler detection from {action.arg}")

    def _remember(self, pkg: PackagePlan, action: Action, log: Path) -> None:
        cmake_seed.remember(action.path, Path(action.arg))

    def _run(self, pkg: PackagePlan, action: Action, log: Path) -> None:
        faults.point("compile")   # tests only (CUFORGE_FAULT): die as the build starts
        with self.env_lock if action.shares_env else nullcontext():
            run(action.step, log=log, stream=self.req.verbose, prefix=self._prefix(pkg))

    def _prefix(self, pkg: PackagePlan) -> str:
        return f"[{pkg.name}] " if self.side_by_side else ""

    def _deps_steps(self, pkg: PackagePlan, log: Path | None = None) -> list[Step]:
        """``pip install --target`` of each dependency's wheel (their names are known only once
        built) into its own overlay dir, unless it is there already, file for file: a
        reinstall would give their headers new times and make ninja rebuild everything that
        includes them (``builddeps``)."""
        latest = self.house.latest()
        steps, same = [], []
        for dep, target in zip(pkg.recipe.depends,
                               builddeps.overlay_dirs(pkg.work, pkg.recipe.depends)):
            entry = latest.get(dep)
            if entry is None or not entry.wheel:
                raise BuildError(f"{pkg.name} needs {dep}, which has no wheel in the wheelhouse",
                                 hint=f"build it first: --only {pkg.name} builds its "
                                 "dependencies")
            wheel = self.house.verified(entry)   # the bytes its line recorded
            step = builddeps.install_step(self.env.python, wheel, target, self.run_env)
            if step is None:
                same.append(wheel.name)
            else:
                steps.append(step)
        if same and log is not None:
            runner.note(log, "already in this package's overlay, file for file (not "
                        "reinstalled, so their files keep their times): " + " ".join(same))
        return steps

    def _smoke(self, recipe) -> dict:
        """verify_wheel's smoke arguments: the recipe's script, or None and why (the flag the
        user gave, or the recipe's lack of one: the report said the latter for both)."""
        if self.req.skip_smoke:
            return {"smoke": None, "no_smoke": "--skip-smoke"}
        return {"smoke": smoke_script(self.project, recipe)}

    def _dependency_paths(self, pkg: PackagePlan) -> list[Path]:
        """Where verification imports the package's dependencies from: its overlays."""
        return builddeps.overlay_dirs(pkg.work, pkg.recipe.depends)

    def _try_prebuilt(self, pkg: PackagePlan, log: Path) -> Made | str:
        """Run the plan's prebuilt actions; keep the wheel only if it covers the arches and
        passes the ABI, symbol, CUDA-runtime, fatbin and import checks. Else: why not."""
        from cuforge.verify import context_from, verify_wheel
        try:
            for action in pkg.prebuilt:
                if action.kind is not ActionKind.GATE:
                    self._do(pkg, action, log)
            wheel = _single_wheel(pkg.work / "prebuilt", pkg.recipe)
        except CuforgeError as err:
            return f"no usable prebuilt wheel ({str(err).splitlines()[0]})"
        try:
            self._install_runtime_requirements(wheel, log)
        except CuforgeError as err:
            return f"prebuilt {wheel.name}: its requirements do not install ({err})"
        with self._timed_check():
            report = verify_wheel(wheel, context_from(self.env.info, pkg.archs, self.run_env,
                                                      no_device=self.env.target.no_device,
                                                      sysroot=self.env.target.sysroot),
                                  **self._smoke(pkg.recipe),
                                  modules=list(pkg.recipe.modules),
                                  dependency_paths=self._dependency_paths(pkg))
        bad = [r for r in report.results if r.check in PREBUILT_GATE and r.status == "fail"]
        bad += [r for r in report.results if r.check == "smoke" and r.status == "fail"]
        if bad:
            why = "; ".join(f"{r.check}: {r.summary}" for r in bad)
            return f"prebuilt {wheel.name} rejected ({why})"
        return Made(wheel, Status.PREBUILT, check_summaries(report), embedded_arches(wheel))

    def _team_index(self) -> list:
        from cuforge.publish import teamwheels
        with self.env_lock:   # read once per run, by whichever package asks first
            if self._team is None:
                self._team = teamwheels.list_wheels(self.req.team_wheels)
            return self._team

    def _try_team(self, pkg: PackagePlan, log: Path) -> Made | str:
        """The team's newest wheel for this package and combo, downloaded and put through the
        pins/RECORD check as published, then every check a wheel built here gets; else why
        not. A refused wheel is kept in the work dir for inspection."""
        from cuforge.publish import teamwheels, wheelmeta
        accel = self.plan.combo.accel.tag
        torch = self._torch_build()
        labels = (wheelmeta.local_label(accel, torch.version, links_torch=True), accel, "")
        try:
            found = teamwheels.candidates(
                self._team_index(), pkg.name, accel=accel, labels=labels,
                python=f"cp{self.plan.combo.python.replace('.', '')}",
                platform_ok=self.plan.combo.target.accepts)
            if not found:
                return (f"the team index {self.req.team_wheels} has no wheel for it "
                              f"(+{labels[0]}, +{accel} or pure, cp{self.plan.combo.python})")
            # the pins check reads the combo from the directory's name, as in a wheelhouse
            staging = pkg.work / "team" / self.plan.wheel_dir.parent.name / self.plan.wheel_dir.name
            shutil.rmtree(staging, ignore_errors=True)
            wheel = teamwheels.download(found[0], staging)
        except CuforgeError as err:
            return f"no team wheel ({err.summary})"
        runner.note(log, f"team wheel {found[0].url}")
        pins = wheelmeta.check(wheel, staging, house=wheelmeta.versions_in(self.plan.wheel_dir))
        if pins is not None and pins.status == "fail":
            return f"team wheel {wheel.name} refused (pins: {pins.detail})"
        try:
            # its import needs its dependencies as a build here gets them (the DEPS action):
            # their wheels from this wheelhouse (the team's, accepted first) into its overlays
            self._deps(pkg, None, log)
            checks, embedded = self._verify(pkg, wheel, log)
        except CuforgeError as err:
            return f"team wheel {wheel.name} refused ({err.summary})"
        if pins is not None:
            checks = {**checks, "pins": f"pass: {pins.detail}"}
        return Made(wheel, Status.PREBUILT, checks, embedded, team=self.req.team_wheels)

    def _verify(self, pkg: PackagePlan, wheel: Path, log: Path
                ) -> tuple[dict[str, str], dict[str, list[str]]]:
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
        checks = check_summaries(report)
        if not report.ok:
            console.print(verdict_line(recipe.name, checks))   # which checks, before the error
            bad = "; ".join(f"{r.check}: {r.detail}" for r in report.results
                            if r.status == "fail")
            raise VerifyError(f"{wheel.name} failed verification: {bad}",
                              hint=f"the wheel stays in {wheel.parent} for inspection; it was "
                              "not added to the wheelhouse")
        return checks, embedded_arches(wheel)

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


# One handler per action kind. The verification stages are the executor's own: the build from
# source stops at VERIFY, and a prebuilt wheel's GATE is _try_prebuilt's decision.
HANDLERS = {ActionKind.CHECK: Executor._check, ActionKind.GUARD: Executor._guard,
            ActionKind.FETCH: Executor._fetch, ActionKind.PATCH: Executor._patch,
            ActionKind.CLEAN: Executor._clean, ActionKind.DEPS: Executor._deps,
            ActionKind.SEED: Executor._seed, ActionKind.REMEMBER: Executor._remember,
            ActionKind.RUN: Executor._run}
STAGES = frozenset({ActionKind.VERIFY, ActionKind.GATE})


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


# Checks a prebuilt wheel must pass to be used (the smoke test runs afterwards as for any wheel).
PREBUILT_GATE = ("abi", "symbols", "cudart", "fatbin", "import")


def _without_cache(pkg: PackagePlan) -> tuple[Action, ...]:
    """The package's actions with each build command as it runs without the compiler cache."""
    plain = dict(pkg.uncached)
    return tuple(replace(a, step=plain.get(a.step, a.step)) if a.step else a
                 for a in pkg.actions if a.kind not in (ActionKind.SEED, ActionKind.REMEMBER))   # cache-only


@contextmanager
def work_lock(work: Path, say) -> Iterator[None]:
    """One build at a time in a package's work dir: two cuforge runs, or two clones sharing a
    ``build_dir``, wait for each other instead of compiling into the same tree."""
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
        fd = getattr(getattr(lock, "_context", None), "lock_file_fd", None)
        with runner.hold(fd) if fd is not None else nullcontext():
            yield
    finally:
        lock.release()


def reset_build_dir(work: Path, source_key: str) -> None:
    """A persistent build dir lets an interrupted build resume, but only for the same sources:
    files exported by ``git archive`` carry their commit's time, so after a move to an older
    commit ninja would call stale objects up to date. Another source key: a fresh build dir."""
    marker = work / ".build.stamp"
    if not marker.exists() or marker.read_text() != source_key:
        shutil.rmtree(work / "build", ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        marker.write_text(source_key)


def describe_sources(recipe: Recipe) -> str:
    """The manifest's ``source``: the main source plus any extra ones (tetra's upstream tree)."""
    extra = "".join(f" {var}={src.describe()}" for var, src in recipe.extra_sources)
    return recipe.source.describe() + extra


def _single_wheel(staging: Path, recipe: Recipe) -> Path:
    wheels = sorted(staging.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"{recipe.name}: expected one wheel in {staging}, found {len(wheels)}")
    return wheels[0]


def _wheel_version(wheel: Path) -> str:
    parts = wheel.name.split("-")
    return parts[1] if len(parts) > 1 else ""


def _record_skip(house: Wheelhouse, combo: Combo, recipe: Recipe, reason: str) -> Entry:
    return house.publish(None, Entry(package=recipe.name, status=Status.SKIPPED, reason=reason,
                                     source=recipe.source.describe(), torch=combo.torch,
                                     python=combo.python, arches_requested=combo.arches.torch()))


def _failed_entry(combo: Combo, recipe: Recipe, reason: str, log: Path, started: float) -> Entry:
    return Entry(package=recipe.name, status=Status.FAILED, reason=reason.splitlines()[0],
                 source=recipe.source.describe(), torch=combo.torch, python=combo.python,
                 arches_requested=combo.arches.torch(), log=str(log),
                 build_seconds=round(time.monotonic() - started, 1))
