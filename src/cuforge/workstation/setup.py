"""``cuforge setup [milo|pointcept] --checkout PATH``: from a verified wheelhouse to a working
environment for the user's own checkout, in one idempotent command. Without a stack name the
checkout decides: a known stack's checkout gets that stack, any other is discovered
(``workstation.which_stack``).

1. build the stack's wheels first when the wheelhouse lacks them or they are out of date;
2. create or reuse the user's venv with uv and put the combo's torch in it;
3. install the stack's wheels (and their runtime requirements, never another torch), then the
   checkout's own requirements with torch and those wheels held (``env.checkoutreqs``); when
   step 1 builds or takes wheels, 2 and the checkout's requirements go beside it, torch held;
4. apply the stack's patch set to the checkout;
5. write the env file (each variable with its why) and hook it into ``bin/activate``;
6. the model stage in that venv: every wheel imported together, then the checkout's own models
   on the GPU (the stack's ``checkout_model``; skipped without a GPU, saying so).

The parts: ``decision`` (what setup will do), ``installs`` (the venv and what goes into it),
``activation`` (the env file), ``model_stage``.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from packaging.utils import canonicalize_name
from rich.console import Console
from rich.text import Text

from cuforge.config.checkout import UserCheckout, pinned_hint
from cuforge.config.recipes import Recipe
from cuforge.config.stacks import Stack, env_file_text
from cuforge.env.target import resolve
from cuforge.core import jsonout
from cuforge.core.console import duration, heartbeat, make_console
from cuforge.core.errors import BuildError, ConfigError, VerifyError
from cuforge.core.project import Project
from cuforge.env.checkoutreqs import CheckoutRequirement, RequirementsOutcome, constraints
from cuforge.verify.checklist import CheckStatus
from cuforge.workstation.activation import env_file, write_env
from cuforge.workstation.checkout_build import drifts, require_patches_apply, source_lines
from cuforge.workstation.decision import (Setup, SetupRequest, check_setup, checkout_requirements,
                                          decide, installable, name_version, usable)
from cuforge.workstation.installs import (dist_version, install_checkout_requirements,
                                          install_wheels, missing_requirements, venv_with_torch)
from cuforge.workstation.model_stage import model_stage
from cuforge.workstation.which_stack import discovery_report, print_discovery, serve


def setup(project: Project, req: SetupRequest, console: Console | None = None) -> int:
    out = console or make_console(stderr=True)
    started = time.monotonic()   # the summary's time is the user's: deciding included
    spent = Phases()
    with spent("deciding"):   # the combo interpreter's torch is asked here
        # once: the checks and the decision read it (a discovered stack: its recipes too)
        served = serve(project, req.stack, req.checkout)
        project, stack = served.project, served.stack
        jsonout.update(**discovery_report(served))
        # refused before anything is written, by the dry run as by the run
        check_setup(project, req, stack)
        target = resolve(project, req.combo)   # once: the build and the venv read it
        target.require_usable()
        p = decide(project, req, target, stack, say=out.print)
    if req.no_build:
        installable(p)   # a required wheel missing: say so before the venv is made
    elif p.checkout is not None:   # before any compiler runs; the dry run refuses it too
        require_patches_apply(drifts(project, _own(req, p), p.checkout), p.required,
                              p.stack.name)
    if req.dry_run:   # the plan on stdout, as build --dry-run prints its plan
        jsonout.update(**_common_report(req, p), dry_run=True, to_build=list(p.to_build),
                       missing=list(p.missing), venv_exists=(req.venv / "pyvenv.cfg").exists())
        print_discovery(served, console or make_console())
        print_setup(project, req, p, console or make_console())
        return 0
    print_discovery(served, out)
    now = {"step": ""}   # what the heartbeat names where no terminal shows progress

    def running() -> list[str]:
        return [f"setup {p.stack.name}: {now['step']} ({duration(time.monotonic() - started)})"
                ] if now["step"] else []   # a build says for itself what it runs

    early = _early_requirements(req, p)
    got: RequirementsOutcome | None = None
    with heartbeat(out, running), ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="cuforge-beside") as pool:
        # The venv and the checkout's requirements need nothing the build makes (torch is
        # held; none of them names a stack package), so they go beside the wheels' build and
        # checks instead of after them (issue 44: a team run is mostly checks and installs).
        beside = (pool.submit(_venv_and_requirements, req, p, early, out, spent)
                  if p.to_build and early is not None else None)
        if p.to_build:
            with spent("wheels"):   # what follows reads the wheelhouse as the build left it
                spent.checks = _build(project, req, p, out)
        if beside is not None:
            now["step"] = "installing the checkout's requirements (beside the wheels)"
            with spent("waiting for the requirements"):   # they took longer than the wheels
                python, got = beside.result()
        else:
            now["step"] = f"the venv {req.venv} with torch {p.combo.torch}"
            with spent("venv"):
                python = venv_with_torch(req, p.combo, p.target, out)
        now["step"] = f"installing the {p.stack.name} wheels"
        with spent("installs"):
            held = install_wheels(python, p, out, req.index)
        now["step"] = "installing the checkout's requirements"
        kept = None
        if beside is not None and got is not None:
            with spent("requirements check"):   # did the wheels move one of them?
                kept = got if still_satisfied(python, p.target.step_env(), got, out) else None
        if kept is not None:
            missing = list(kept.missing)
        else:   # after the wheels, everything held: the order that cannot clash
            with spent("requirements" if beside is None else "requirements again"):
                missing = (list(install_checkout_requirements(python, p, req, held, out)
                                .missing) if req.requirements else [])
        now["step"] = f"patching {req.checkout}"
        with spent("patch"):
            _patch(project, req, p.stack, out)
        write_env(req.venv, settled(p))
        out.print(Text(f"env file: {env_file(req.venv, p.stack.name)} (sourced by "
                       f"{req.venv / 'bin' / 'activate'})"))
        now["step"] = "the model stage"
        with spent("model stage"):
            ok = model_stage(project, python, p, out, checkout=req.checkout)
    out.print(Text(f"where the time went: {spent.summary(time.monotonic() - started)}"),
              soft_wrap=True)   # one line: the bench reads it
    if missing:
        out.print(Text(f"not installed (see above): {', '.join(m.requirement.spec for m in missing)}"
                       + ("; the model stage passed without them" if ok else ""),
                       style="yellow"))
    jsonout.update(**_common_report(req, p), dry_run=False, model_stage_ok=ok,
                   not_installed=[m.requirement.spec for m in missing],
                   phases={k: round(v, 1) for k, v in spent.seconds.items()},
                   seconds=round(time.monotonic() - started, 1),
                   activate=str(req.venv / "bin" / "activate"))
    out.print(Text(f"{'done' if ok else 'model stage FAILED'} in "
                   f"{duration(time.monotonic() - started)}: source "
                   f"{req.venv / 'bin' / 'activate'}", style="bold"), soft_wrap=True)
    return 0 if ok else VerifyError.exit_code


def _common_report(req: SetupRequest, p: Setup) -> dict:
    """What ``setup --json`` says with and without --dry-run (docs/json.md)."""
    return {"stack": p.stack.name, "combo": p.combo.id, "torch": p.combo.torch,
            "arches": p.combo.arches.torch(), "checkout": str(req.checkout),
            "venv": str(req.venv), "wheelhouse": str(p.house.dir),
            "wheels": [r.name for r in p.recipes], "required": sorted(p.required),
            "env_file": str(env_file(req.venv, p.stack.name)), "kernels": p.kernels}


def _print_kernels(p: Setup, out: Console) -> None:
    if p.kernels:
        out.print(Text(f"   kernel set: {p.kernels} ({p.kernels_why})"))


def print_setup(project: Project, req: SetupRequest, p: Setup, out: Console) -> None:
    out.print(Text(f"cuforge setup {p.stack.name} (dry run): combo {p.combo.id}, torch "
                   f"{p.combo.torch}, arches {p.combo.arches}", style="bold"))
    if req.no_build:
        out.print(Text("1. build: nothing (--no-build); missing: "
                       f"{', '.join(p.missing) or 'none'}"))
    else:
        out.print(Text(f"1. build: {', '.join(p.to_build)} and their dependencies, except wheels "
                       f"already up to date (same plan key); missing now: "
                       f"{', '.join(p.missing) or 'none'}"
                       + (f"; the team's wheels from {req.team_wheels} first, each checked "
                          "as a wheel built here" if req.team_wheels else "")))
        _print_sources(project, req, p, out)
        _print_kernels(p, out)
    out.print(Text(f"2. venv {req.venv}: {'reuse' if (req.venv / 'pyvenv.cfg').exists() else 'create'}"
                   f"; torch {p.combo.torch} "
                   + (f"from {p.combo.interpreter} (.pth)" if p.combo.interpreter else "via uv")))
    names = [r.name for r in p.recipes]
    optional = [n for n in names if n not in p.required]
    out.print(Text(f"3. install from {p.house.dir}: {', '.join(names)}"
                   + (f" (optional: {', '.join(optional)})" if optional else "")))
    _print_requirements(req, p, out)
    if p.stack.patch_set:
        out.print(Text(f"4. patch set {p.stack.patch_set} on {req.checkout}:"))
        _patch(project, req, p.stack, out)
    else:
        out.print(Text(f"4. patch {req.checkout}: nothing (the {p.stack.name} stack has no "
                       "patch set)"))
    out.print(Text(f"5. {env_file(req.venv, p.stack.name)}:"))
    out.print(Text(env_file_text(p.stack).rstrip(), style="dim"), soft_wrap=True)  # copyable
    scripts = (f"{', '.join(p.stack.entry_scripts)} with --help, then "
               if p.stack.entry_scripts else "")
    out.print(Text(f"6. model stage: import {', '.join(names)} together, then {scripts}"
                   + (f"{p.stack.checkout_model} {req.checkout}" if p.stack.checkout_model
                      else "no model check")))


def _print_sources(project: Project, req: SetupRequest, p: Setup, out: Console) -> None:
    """Step 1's sources: the checkout's own folders, else the recipe's pin, per package; and
    each recipe patch set that does not apply to the checkout's copy."""
    if not p.stack.repo:
        return
    mine = UserCheckout(p.stack.repo, req.checkout)
    out.print(Text("   sources (a copy is built and patched; your checkout is not written):"))
    for line in source_lines(p.recipes, mine, pinned=req.pinned,
                             overrides=dict(req.src_overrides)):
        out.print(Text(f"     {line}"), soft_wrap=True)
    if p.checkout is not None:
        for drift in drifts(project, _own(req, p), p.checkout):
            out.print(Text(f"     {drift.text()}\n       fix: "
                           f"{pinned_hint(drift.patch_set, p.stack.name)}", style="yellow"),
                      soft_wrap=True)


def _own(req: SetupRequest, p: Setup) -> tuple[Recipe, ...]:
    """The stack's recipes that setup may build from the checkout (not those given --src)."""
    given = {name for name, _ in req.src_overrides}
    return tuple(r for r in p.recipes if r.name not in given)


def _print_requirements(req: SetupRequest, p: Setup, out: Console) -> None:
    """Step 3's second half in the dry run: the requirements and the constraint holding them."""
    if not req.requirements:
        out.print(Text("   the checkout's requirements: skipped (--no-requirements)"))
        return
    try:
        reqs = checkout_requirements(p.stack, req.checkout)
    except ConfigError as err:
        out.print(Text(f"   the checkout's requirements: {str(err).splitlines()[0]}"))
        return
    if not reqs and not p.stack.requirements_file:
        out.print(Text("   the checkout's requirements: none (no requirements file found)"))
        return
    latest = p.house.latest()
    held = constraints([("torch", p.combo.torch + (" (as installed)" if p.combo.interpreter
                                                   else "")),
                        *(name_version(p.house.dir / e.wheel)
                          for r in p.recipes if usable(p.house, e := latest.get(r.name)))])
    out.print(Text(f"   then the checkout's requirements ({len(reqs)}), from "
                   f"{p.stack.requirements_file or p.stack.file.name}:"))
    for r in reqs:
        out.print(Text(f"     {r.spec}  ({r.source})"))
    out.print(Text(f"   constraint (torch and the stack's wheels held): {' '.join(held)}"))
    if req.index.args():
        out.print(Text(f"   index options: {' '.join(req.index.args())} (and the installer's "
                       "own PIP_*/UV_* settings)"))


class Phases:
    """Wall seconds per setup phase, for the summary ("wheels 14.2 s (checks 6.1 s), ...").
    A phase run beside the wheels' build says so: its seconds are inside the wheels' time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.checks = 0.0     # of the wheels phase: some wheel being checked
        self.beside: set[str] = set()

    @contextmanager
    def __call__(self, name: str, *, beside: bool = False) -> Iterator[None]:
        started = time.monotonic()
        if beside:
            self.beside.add(name)
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started

    def summary(self, total: float) -> str:
        """Each phase that took time, then ``other``: what ``total`` holds besides them (the
        CLI's start, the env file, the messages), so that the parts add up to the time the
        user waited.

        >>> p = Phases(); p.seconds = {"wheels": 14.24, "venv": 1.0, "patch": 0.01}
        >>> p.checks = 6.1; p.beside = {"venv"}; p.summary(20.0)
        'wheels 14.2 s (checks 6.1 s), venv 1.0 s (beside the wheels), other 5.8 s'
        """
        def one(name: str, s: float) -> str:
            note = (f" (checks {self.checks:.1f} s)" if name == "wheels" else
                    " (beside the wheels)" if name in self.beside else "")
            return f"{name} {s:.1f} s{note}"
        inside = sum(s for name, s in self.seconds.items() if name not in self.beside)
        shown = [one(name, s) for name, s in self.seconds.items() if s >= 0.05]   # no 0.0 s
        return ", ".join([*shown, f"other {max(0.0, total - inside):.1f} s"])


def settled(p: Setup) -> Stack:
    """The stack with each evidence-driven variable decided by the wheelhouse's latest
    entries (a wheel that passed its stress keeps spconv's fast algorithms)."""
    passed = {(name, check): str(result.detail or "")
              for name, entry in p.house.latest().items()
              for check, result in entry.checks.items() if result.status == CheckStatus.PASS}
    return replace(p.stack, env=tuple(var.settle(passed) for var in p.stack.env))


def _build(project: Project, req: SetupRequest, p: Setup, out: Console) -> float:
    """Build what is missing; the seconds its checks took."""
    from cuforge.pipeline.executor import build
    from cuforge.pipeline.request import BuildRequest
    out.print(Text(f"wheels: building what is missing or out of date (missing now: "
                   f"{', '.join(p.missing) or 'none'})"))
    _print_sources(project, req, p, out)
    _print_kernels(p, out)
    # keep going: an optional package's failure must not stop the others; --json: the
    # build's report goes under "build"
    outcome = build(project, BuildRequest(combo=p.combo, target=p.target,
                                          interpreter=p.interpreter, cache=p.cache,
                                          packages=p.to_build, jobs=req.jobs,
                                          rebuild=req.rebuild, keep_going=True,
                                          src_overrides=req.src_overrides,
                                          checkout=p.checkout, stress=req.stress,
                                          sanitize=req.sanitize, kernels=p.kernels,
                                          team_wheels=req.team_wheels),
                    on_report=lambda r: jsonout.update(build=r))
    needed = [e.package for e in outcome.failed if e.package in p.required]
    if needed:
        raise BuildError(f"the {p.stack.name} stack needs {', '.join(needed)}, which failed to "
                         "build", hint="see the build output above; `invoke doctor` lists "
                         "missing tools and headers")
    return outcome.check_seconds


def _early_requirements(req: SetupRequest, p: Setup) -> list[CheckoutRequirement] | None:
    """The checkout's requirements when they may go in beside the wheels' build ([] when
    there are none or --no-requirements), or None when they must wait for the wheels: one of
    them names a package this setup installs (the installer would fetch that package from the
    index, or build its sdist, instead of taking the wheel being built here). A recipe of
    another stack (Pointcept's torch-geometric) comes from the index either way."""
    if not req.requirements:
        return []
    try:
        reqs = checkout_requirements(p.stack, req.checkout)
    except ConfigError:
        return None          # said in the requirements step, in its usual place
    ours = {canonicalize_name(r.name) for r in p.recipes}
    for r in reqs:
        name = canonicalize_name(r.name)
        if name in ours or re.sub(r"-cu\d+$", "", name) in ours:   # spconv-cu124
            return None
    return reqs


def _venv_and_requirements(req: SetupRequest, p: Setup, reqs: list[CheckoutRequirement],
                           out: Console, spent: Phases) -> tuple[Path, RequirementsOutcome | None]:
    """Beside the wheels' build: the venv with torch, then the checkout's requirements with
    torch held (the stack's wheels go in after, without dependencies)."""
    with spent("venv", beside=True):
        python = venv_with_torch(req, p.combo, p.target, out)
    if not req.requirements:
        return python, None
    with spent("requirements", beside=True):
        held = constraints([("torch", dist_version(python, "torch", p.target.step_env()))])
        return python, install_checkout_requirements(python, p, req, held, out, reqs)


def still_satisfied(python: Path, env: tuple[tuple[str, str], ...],
                    got: RequirementsOutcome, out: Console) -> bool:
    """After the wheels and their runtime requirements went in: does every requirement put in
    beside the build still hold? A wheel's own requirement may have moved one (then the
    requirements step runs again, after the wheels, with everything held)."""
    moved = missing_requirements(python, {r.spec for r in got.installed}, env)
    if moved:
        out.print(Text(f"the stack's wheels moved {', '.join(sorted(moved))}: installing the "
                       "checkout's requirements again, the wheels held", style="yellow"))
    return not moved


def _patch(project: Project, req: SetupRequest, stack: Stack, out: Console) -> None:
    if not stack.patch_set:
        return
    from cuforge.patching.commands import run_patch_command
    run_patch_command(stack.patch_set, req.checkout, check=False, revert=False,
                      dry_run=req.dry_run, patches_dir=project.patches_dir, console=out)
