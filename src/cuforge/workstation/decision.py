"""What ``cuforge setup`` will do, decided before anything runs: the parsed request, the
stack's recipes in build order, what to build, what is missing, and which wheels install."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename

from cuforge.config.checkout import UserCheckout
from cuforge.config.combos import Combo
from cuforge.config.kernels import set_of
from cuforge.config.inputs import (check_checkout, check_jobs, check_src_overrides,
                                   check_team_wheels, check_venv_path)
from cuforge.config.recipes import Recipe, build_order, load_recipes
from cuforge.config.stacks import Stack
from cuforge.env.target import Target
from cuforge.core.errors import ConfigError, MissingWheelError
from cuforge.core.project import Project
from cuforge.env import venv
from cuforge.env.checkoutreqs import CheckoutRequirement, IndexOptions, parse_requirements_file
from cuforge.env.torchinfo import TorchInfo
from cuforge.pipeline import cache_config
from cuforge.pipeline.cache_config import CacheConfig
from cuforge.publish.wheelhouse import Entry, Status, Wheelhouse
from cuforge.publish.writable import check_wheelhouse


@dataclass(frozen=True)
class SetupRequest:
    """A parsed ``setup`` command."""

    stack: str
    checkout: Path
    venv: Path
    combo: Combo
    dry_run: bool = False
    jobs: int = 1
    rebuild: bool = False        # rebuild the stack's wheels even when up to date
    no_build: bool = False       # install what the wheelhouse has; build nothing
    src_overrides: tuple[tuple[str, Path], ...] = ()   # --src NAME=PATH, as for build
    requirements: bool = True    # the checkout's own requirements (--no-requirements: skip)
    index: IndexOptions = IndexOptions()   # --find-links DIR, --no-index
    team_wheels: str = ""        # --wheels URL|DIR: a team's index, tried before compiling
    pinned: bool = False         # --pinned: upstream's pinned copies, not the checkout's own
    stress: bool = False         # --stress: each wheel's [stress] before it is installed
    sanitize: bool = False       # --sanitize: the same, short, under compute-sanitizer
    kernels: str | None = None   # --kernels SET: a [kernels] recipe's set (spconv: lean, full, 3d)


@dataclass(frozen=True)
class Setup:
    """What setup will do, decided before anything runs (``--dry-run`` prints it)."""

    stack: Stack
    combo: Combo
    recipes: tuple[Recipe, ...]          # the stack's packages and their dependencies, in order
    to_build: tuple[str, ...]            # handed to the build (it skips the up-to-date ones)
    missing: tuple[str, ...]             # no usable wheel in the wheelhouse yet
    house: Wheelhouse
    required: frozenset[str]             # the non-optional packages and their dependencies
    target: Target                       # where the combo's code runs (cuforge.env.target)
    # the checkout as a source: the packages it holds build from it (None: --pinned)
    checkout: UserCheckout | None = None
    wheelhouse_option: str = ""          # " --wheelhouse DIR" when the user gave one
    cache: CacheConfig = CacheConfig()   # the compiler cache its build runs under
    # an ``interpreter = ...`` combo's interpreter, probed once here: its torch is the combo's
    # (``combo``), and the build takes these facts instead of asking again
    interpreter: TorchInfo | None = None
    kernels: str | None = None           # the kernel set the build asks for (None: recipes')
    kernels_why: str = ""                # where that set comes from, for the user


def decide(project: Project, req: SetupRequest, target: Target, stack: Stack,
           say=print) -> Setup:
    """What setup will do with ``stack`` (read once, by the caller); ``say``: the compiler
    cache's line (a dist scheduler is asked here)."""
    from cuforge.pipeline.plan import wheel_dir
    recipes = load_recipes(project)
    unknown = [n for n in (*stack.packages, *stack.optional) if n not in recipes]
    if unknown:
        raise ConfigError(f"stack {stack.name} names packages without a recipe: "
                          f"{', '.join(unknown)}", hint=f"fix `packages` in {stack.file}")
    order = build_order(recipes, [*stack.packages, *stack.optional])
    required = frozenset(r.name for r in build_order(recipes, list(stack.packages))
                         ) if stack.packages else frozenset()
    combo, interpreter = req.combo, None
    if combo.interpreter:   # its torch decides the wheelhouse, as in a build
        interpreter = venv.check_interpreter(combo, target, remember=not req.dry_run)
        combo = venv.with_interpreter(combo, interpreter)
    house = Wheelhouse(wheel_dir(project, combo))
    latest = house.latest()
    missing = tuple(r.name for r in order if not usable(house, latest.get(r.name)))
    # An optional package that failed before is not retried on every run (--rebuild does).
    to_build = () if req.no_build else tuple(
        n for n in (*stack.packages, *stack.optional)
        if req.rebuild or n in required or not _failed(latest.get(n)))
    checkout = None if req.pinned or not stack.repo else UserCheckout(stack.repo, req.checkout)
    given = (f" --wheelhouse {project.wheel_root}"
             if project.wheelhouse_named_by == "--wheelhouse" else "")
    cache = cache_config.decide(project.envs_dir, combo_spec=combo.cache, say=say)
    kernels, kernels_why = kernel_set(req, stack, house, latest)
    return Setup(stack, combo, tuple(order), to_build, missing, house, required, target,
                 checkout, given, cache, interpreter, kernels, kernels_why)


def kernel_set(req: SetupRequest, stack: Stack, house: Wheelhouse,
               latest: dict[str, Entry]) -> tuple[str | None, str]:
    """The kernel set setup's build asks for, and why: ``--kernels``; else the set of the
    stack's wheel the wheelhouse holds (never rebuilt only to change its set: a lean wheel
    built by ``cuforge build`` serves Pointcept too); with a team's wheels (``--wheels``) the
    recipes', which the team's builds used; else the stack's own; else the recipes'."""
    if req.kernels:
        return req.kernels, "--kernels"
    held = {set_of(e.kernels) for n in stack.packages
            if usable(house, e := latest.get(n)) and e.kernels}
    if len(held) == 1:
        return held.pop(), "the set of the wheel the wheelhouse holds; --kernels SET to change it"
    if req.team_wheels:   # a team's wheels are built with the recipes' sets, as here by default
        return None, ""
    if stack.kernels:
        return stack.kernels, (f"the {stack.name} stack's, from {stack.file.name}; "
                               "--kernels lean for the whole API")
    return None, ""


def usable(house: Wheelhouse, entry: Entry | None) -> bool:
    return (entry is not None and entry.status.has_wheel
            and (house.dir / entry.wheel).is_file())


def _failed(entry: Entry | None) -> bool:
    return entry is not None and entry.status is Status.FAILED


def installable(p: Setup) -> tuple[list[tuple[Recipe, Path]], list[str]]:
    """The (recipe, wheel) pairs to install, and the optional packages left out (with why).
    A required package without a wheel is an error; one recorded as skipped (no kernels for
    these arches) installs nothing."""
    latest = p.house.latest()
    wheels: list[tuple[Recipe, Path]] = []
    left_out: list[str] = []
    missing: list[str] = []   # every one named at once, with one command that builds them
    for r in p.recipes:
        entry = latest.get(r.name)
        usable = (entry is not None and entry.status.has_wheel
                  and (p.house.dir / entry.wheel).is_file())
        if usable:
            wheels.append((r, p.house.dir / entry.wheel))
        elif entry is not None and entry.status is Status.SKIPPED and r.name in p.required:
            left_out.append(f"{r.name} ({entry.reason or 'skipped'})")
        elif r.name not in p.required:
            why = entry.reason.splitlines()[0] if entry and entry.reason else "no wheel"
            left_out.append(f"{r.name} (optional: {why})")
        else:
            missing.append(r.name)
    if missing:
        have = "has" if len(missing) == 1 else "have"
        raise MissingWheelError(f"{', '.join(missing)} {have} no wheel in {p.house.dir}",
                                hint=f"build them: cuforge build --combo {p.combo.id} "
                                     f"--only {','.join(missing)}{p.wheelhouse_option}")
    return wheels, left_out


def checkout_requirements(stack: Stack, checkout: Path) -> list[CheckoutRequirement]:
    """The stack's own list, or the requirements file in the user's checkout as it is there."""
    if not stack.requirements_file:
        return list(stack.requirements)
    path = checkout / stack.requirements_file
    if not path.is_file():
        raise ConfigError(f"{stack.file.name} says the checkout has {stack.requirements_file}, "
                          f"but {path} does not exist",
                          hint="check --checkout, or pass --no-requirements")
    return parse_requirements_file(path, stack.requirements_file)


def name_version(wheel: Path) -> tuple[str, str]:
    name, version, _, _ = parse_wheel_filename(wheel.name)
    return str(name), str(version)


def check_setup(project: Project, req: SetupRequest, stack: Stack) -> None:
    """Everything of a ``setup`` request that can be refused before anything is written (the
    same for ``--dry-run``); the build it may start checks its own (``check_build``), but
    the venv is made beside that build, so the wheelhouse is asked here first."""
    check_jobs(req.jobs)
    check_checkout(req.checkout, stack)
    check_venv_path(req.venv)
    check_src_overrides(req.src_overrides)
    check_team_wheels(req.team_wheels)
    if not req.no_build:   # --no-build only reads the wheelhouse
        check_wheelhouse(project, req.combo)
