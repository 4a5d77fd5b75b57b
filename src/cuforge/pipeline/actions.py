"""The plan's in-process actions, one handler per ``ActionKind`` (``HANDLERS``): check the
system headers, guard against an installed copy, fetch, patch, clean, install the dependencies'
wheels into the package's overlay, seed and keep CMake's compiler detection, and run a command
(``Step``) exactly as planned. The verification stages (``STAGES``) are the gate's
(``pipeline.gate``)."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path

from cuforge.pipeline.request import BuildRequest
from cuforge.core import faults, runner
from cuforge.core.project import Project
from cuforge.core.runner import Step, run
from cuforge.env import builddeps, syslibs, venv
from cuforge.pipeline import sources
from cuforge.pipeline.builders import cmake_seed
from cuforge.pipeline.plan import Action, ActionKind, PackagePlan, own_modules
from cuforge.publish.wheelhouse import Wheelhouse
from cuforge.config.checkout import pinned_hint
from cuforge.core.errors import BuildError, PatchError


class ActionHandlers:
    """The executor's handlers of the plan's actions (mixed into ``executor.Executor``, which
    sets the attributes below)."""

    project: Project
    req: BuildRequest
    env: venv.ComboEnv
    run_env: tuple[tuple[str, str], ...]
    house: Wheelhouse
    env_lock: threading.Lock
    side_by_side: bool

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
            reset_build_dir(pkg.work, pkg.source_key, fresh=self.req.rebuild)
            source = recipe.source
        sources.fetch(source, project_root=self.project.root,
                      cache_dir=self.project.state_dir / "cache", dest=action.path,
                      stamp=pkg.source_key, fresh=self.req.rebuild)

    def _patch(self, pkg: PackagePlan, action: Action, log: Path) -> None:
        from cuforge import patching   # lazily: only recipes with patches need the engine
        patch_set = patching.load_patch_set(action.arg, patches_dir=self.project.patches_dir)
        try:
            patching.apply(patch_set, action.path)
        except PatchError as err:
            if not pkg.recipe.source.checkout:
                raise
            raise PatchError(  # the user's version, not upstream's pin: say the way back
                f"{pkg.name} from your checkout ({pkg.recipe.source.checkout}): "
                + str(err).removesuffix(f"\n  fix: {err.hint}"),
                hint=pinned_hint(action.arg)) from None

    def _deps(self, pkg: PackagePlan, action: Action | None, log: Path, *,
              wheels: Mapping[str, Path] | None = None) -> None:
        for step in self._deps_steps(pkg, log, wheels):   # its own overlay: its lock only
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

    def _deps_steps(self, pkg: PackagePlan, log: Path | None = None,
                    wheels: Mapping[str, Path] | None = None) -> list[Step]:
        """``pip install --target`` of each dependency's wheel (their names are known only once
        built; ``wheels``: given, as a team's checked ahead) into its own overlay dir, unless it
        is there already, file for file: a reinstall would give their headers new times and
        make ninja rebuild everything that includes them (``builddeps``)."""
        latest = self.house.latest()
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


# One handler per action kind. The verification stages are the executor's own: the build from
# source stops at VERIFY, and a prebuilt wheel's GATE is _try_prebuilt's decision.
HANDLERS = {ActionKind.CHECK: ActionHandlers._check, ActionKind.GUARD: ActionHandlers._guard,
            ActionKind.FETCH: ActionHandlers._fetch, ActionKind.PATCH: ActionHandlers._patch,
            ActionKind.CLEAN: ActionHandlers._clean, ActionKind.DEPS: ActionHandlers._deps,
            ActionKind.SEED: ActionHandlers._seed, ActionKind.REMEMBER: ActionHandlers._remember,
            ActionKind.RUN: ActionHandlers._run}

STAGES = frozenset({ActionKind.VERIFY, ActionKind.GATE})


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
