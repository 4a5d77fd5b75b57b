"""One build's context: what every package's work reads (the project, the request, the combo
env, the plan, the wheelhouse, where logs go, what wheels are checked against, the lock on the
env, the live display), decided once by the executor and passed to the wheel sources
(``wheelsource``), the verification and publishing (``gate``) and the action handlers
(``actions``) as their first argument. What the packages' threads record while the run goes is
``RunState``, its one mutable part."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import Progress

from cuforge.core.project import Project
from cuforge.env.venv import ComboEnv
from cuforge.pipeline.compiler_cache import CacheReport
from cuforge.pipeline.made import Ahead
from cuforge.pipeline.plan import Plan
from cuforge.pipeline.request import BuildRequest
from cuforge.publish.teamwheels import TeamWheel
from cuforge.publish.wheelhouse import Wheelhouse
from cuforge.publish.wheelmeta import TorchBuild
from cuforge.verify import VerifyContext, context_from


@dataclass
class RunState:
    """What the packages' threads find and record during one run (each read or written under
    the context's ``env_lock`` where two threads could race)."""

    runtime: dict[str, list[str]] = field(default_factory=dict)   # wheel -> what verify installed
    cache_reports: dict[str, CacheReport] = field(default_factory=dict)   # package -> its sccache
    check_spans: list[tuple[float, float]] = field(default_factory=list)  # each verification
    ahead: dict[str, Ahead] = field(default_factory=dict)   # package -> its team wheel, checked
    team: list[TeamWheel] | None = None    # the team index's wheels (--wheels), read once
    torch_dist: TorchBuild | None = None   # the env's torch as an index lists it, probed once


@dataclass(frozen=True)
class BuildContext:
    """Everything one build's packages share, decided before the first package starts."""

    project: Project
    req: BuildRequest
    combo_env: ComboEnv
    plan: Plan
    log_dir: Path
    recipe_names: frozenset[str]   # never installed from an index (runtimedeps.split)
    run_env: tuple[tuple[str, str], ...]   # what the env's Python needs to run (emulation)
    checking: VerifyContext   # what every wheel is checked against (a package's arches apart)
    house: Wheelhouse
    progress: Progress        # the live display: one line per running package
    side_by_side: bool        # packages build at once: their streamed lines get a prefix
    env_lock: threading.Lock = field(default_factory=threading.Lock, compare=False)
    state: RunState = field(default_factory=RunState, compare=False)


def open_context(project: Project, req: BuildRequest, combo_env: ComboEnv, plan: Plan,
                 log_dir: Path, recipe_names: frozenset[str], progress: Progress
                 ) -> BuildContext:
    """The build's context; its wheelhouse opened (a publish a killed run left half-done is
    finished or undone first)."""
    house = Wheelhouse.open(plan.wheel_dir, project.wheelhouse_named_by)
    side_by_side = plan.pooled or sum(1 for p in plan.packages if p.jobs < plan.jobs) > 1
    run_env = combo_env.target.step_env()
    checking = context_from(combo_env.info, None, run_env, no_device=combo_env.target.no_device,
                            sysroot=combo_env.target.sysroot,
                            glibc_floor=plan.combo.glibc_floor, combo=plan.combo.id)
    return BuildContext(project, req, combo_env, plan, log_dir, recipe_names, run_env, checking,
                        house, progress, side_by_side)
