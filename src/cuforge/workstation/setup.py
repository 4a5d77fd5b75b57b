"""``cuforge setup milo|pointcept --checkout PATH``: from a verified wheelhouse to a working
environment for the user's own checkout, in one idempotent command.

1. build the stack's wheels first when the wheelhouse lacks them or they are out of date;
2. create or reuse the user's venv with uv and put the combo's torch in it;
3. install the stack's wheels (and their runtime requirements, never another torch), then the
   checkout's own requirements with torch and those wheels held (``cuforge.checkoutreqs``);
4. apply the stack's patch set to the checkout;
5. write the env file (each variable with its why) and hook it into ``bin/activate``;
6. the model stage in that venv: every wheel imported together, then the checkout's own models
   on the GPU (the stack's ``checkout_model``; skipped without a GPU, saying so).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from rich.console import Console
from rich.text import Text

from cuforge.env import programs as tools, venv
from cuforge.env.checkoutreqs import (CheckoutRequirement, IndexOptions, Installer, constraints,
                                      parse_requirements_file)
from cuforge.config.combos import Combo
from cuforge.core.console import duration, heartbeat, make_console, verdict_line
from cuforge.core.errors import (BuildError, ConfigError, EnvError, MissingWheelError,
                                 ToolchainError, VerifyError)
from cuforge.config.inputs import check_setup
from cuforge.core.project import Project
from cuforge.config.recipes import Recipe, load_recipes, build_order
from cuforge.core.runner import Step, capture, run
from cuforge.config.target import Target, resolve
from cuforge.config.stacks import Stack, env_file_text, load_stack
from cuforge.publish.wheelhouse import Entry, Status, Wheelhouse

HOOK_BEGIN = "# >>> cuforge setup {name} >>>"
HOOK_END = "# <<< cuforge setup {name} <<<"


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
    target: Target                       # where the combo's code runs (cuforge.target)


def env_file(venv_dir: Path, stack: str) -> Path:
    return venv_dir / f"cuforge-{stack}.env"


def setup(project: Project, req: SetupRequest, console: Console | None = None) -> int:
    out = console or make_console(stderr=True)
    # refused before anything is written, by the dry run as by the run
    check_setup(req, load_stack(project, req.stack))
    target = resolve(project, req.combo)   # once: the build and the venv read it
    target.require_usable()
    p = decide(project, req, target)
    if req.no_build:
        installable(p)   # a required wheel missing: say so before the venv is made
    if req.dry_run:   # the plan on stdout, as build --dry-run prints its plan
        print_setup(project, req, p, console or make_console())
        return 0
    started = time.monotonic()
    now = {"step": ""}   # what the heartbeat names where no terminal shows progress

    def running() -> list[str]:
        return [f"setup {p.stack.name}: {now['step']} ({duration(time.monotonic() - started)})"
                ] if now["step"] else []   # a build says for itself what it runs

    spent = Phases()
    with heartbeat(out, running):
        if p.to_build:
            with spent("wheels"):
                spent.checks = _build(project, req, p, out)
            p = decide(project, req, target)          # the wheelhouse changed
        now["step"] = f"the venv {req.venv} with torch {p.combo.torch}"
        with spent("venv"):
            python = _venv_with_torch(req, p.combo, p.target, out)
        now["step"] = f"installing the {p.stack.name} wheels"
        with spent("installs"):
            held = _install_wheels(python, p, out, req.index)
        now["step"] = "installing the checkout's requirements"
        with spent("requirements"):
            missing = (_install_checkout_requirements(python, p, req, held, out)
                       if req.requirements else [])
        now["step"] = f"patching {req.checkout}"
        with spent("patch"):
            _patch(project, req, p.stack, out)
        write_env(req.venv, p.stack)
        out.print(Text(f"env file: {env_file(req.venv, p.stack.name)} (sourced by "
                       f"{req.venv / 'bin' / 'activate'})"))
        now["step"] = "the model stage"
        with spent("model stage"):
            ok = model_stage(project, python, p, out, checkout=req.checkout)
    out.print(Text(f"where the time went: {spent}"))
    if missing:
        out.print(Text(f"not installed (see above): {', '.join(m.requirement.spec for m in missing)}"
                       + ("; the model stage passed without them" if ok else ""),
                       style="yellow"))
    out.print(Text(f"{'done' if ok else 'model stage FAILED'} in "
                   f"{duration(time.monotonic() - started)}: source "
                   f"{req.venv / 'bin' / 'activate'}", style="bold"), soft_wrap=True)
    return 0 if ok else VerifyError.exit_code


# -- what setup will do ---------------------------------------------------------------------
def decide(project: Project, req: SetupRequest, target: Target) -> Setup:
    from cuforge.pipeline.plan import wheel_dir
    stack = load_stack(project, req.stack)
    recipes = load_recipes(project)
    unknown = [n for n in (*stack.packages, *stack.optional) if n not in recipes]
    if unknown:
        raise ConfigError(f"stack {stack.name} names packages without a recipe: "
                          f"{', '.join(unknown)}", hint=f"fix `packages` in {stack.file}")
    order = build_order(recipes, [*stack.packages, *stack.optional])
    required = frozenset(r.name for r in build_order(recipes, list(stack.packages)))
    combo = req.combo
    if combo.interpreter:   # its torch decides the wheelhouse, as in a build
        combo = replace(combo, torch=venv.check_interpreter(combo, target).torch)
    house = Wheelhouse(wheel_dir(project, combo))
    latest = house.latest()
    missing = tuple(r.name for r in order if not _usable(house, latest.get(r.name)))
    # An optional package that failed before is not retried on every run (--rebuild does).
    to_build = () if req.no_build else tuple(
        n for n in (*stack.packages, *stack.optional)
        if req.rebuild or n in required or not _failed(latest.get(n)))
    return Setup(stack, combo, tuple(order), to_build, missing, house, required, target)


def _usable(house: Wheelhouse, entry: Entry | None) -> bool:
    return (entry is not None and entry.status.has_wheel
            and (house.dir / entry.wheel).is_file())


def _failed(entry: Entry | None) -> bool:
    return entry is not None and entry.status is Status.FAILED


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
    out.print(Text(f"2. venv {req.venv}: {'reuse' if (req.venv / 'pyvenv.cfg').exists() else 'create'}"
                   f"; torch {p.combo.torch} "
                   + (f"from {p.combo.interpreter} (.pth)" if p.combo.interpreter else "via uv")))
    names = [r.name for r in p.recipes]
    optional = [n for n in names if n not in p.required]
    out.print(Text(f"3. install from {p.house.dir}: {', '.join(names)}"
                   + (f" (optional: {', '.join(optional)})" if optional else "")))
    _print_requirements(req, p, out)
    out.print(Text(f"4. patch set {p.stack.patch_set} on {req.checkout}:"))
    _patch(project, req, p.stack, out)
    out.print(Text(f"5. {env_file(req.venv, p.stack.name)}:"))
    out.print(Text(env_file_text(p.stack).rstrip(), style="dim"), soft_wrap=True)  # copyable
    out.print(Text(f"6. model stage: import {', '.join(names)} together, then "
                   + (f"{p.stack.checkout_model} {req.checkout}" if p.stack.checkout_model
                      else "no model check")))


# -- steps -----------------------------------------------------------------------------------
class Phases:
    """Wall seconds per setup phase, for the summary ("wheels 14.2 s (checks 6.1 s), ...")."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.checks = 0.0     # of the wheels phase: some wheel being checked

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started

    def __str__(self) -> str:
        """
        >>> p = Phases(); p.seconds = {"wheels": 14.24, "venv": 1.0}; p.checks = 6.1
        >>> str(p)
        'wheels 14.2 s (checks 6.1 s), venv 1.0 s'
        """
        return ", ".join(f"{name} {s:.1f} s" + (f" (checks {self.checks:.1f} s)"
                                               if name == "wheels" else "")
                         for name, s in self.seconds.items())


def _build(project: Project, req: SetupRequest, p: Setup, out: Console) -> float:
    """Build what is missing; the seconds its checks took."""
    from cuforge.pipeline.executor import build
    from cuforge.config.request import BuildRequest
    out.print(Text(f"wheels: building what is missing or out of date (missing now: "
                   f"{', '.join(p.missing) or 'none'})"))
    # keep going: an optional package's failure must not stop the others
    outcome = build(project, BuildRequest(combo=p.combo, target=p.target,
                                          packages=p.to_build, jobs=req.jobs,
                                          rebuild=req.rebuild, keep_going=True,
                                          src_overrides=req.src_overrides,
                                          team_wheels=req.team_wheels))
    needed = [e.package for e in outcome.failed if e.package in p.required]
    if needed:
        raise BuildError(f"the {p.stack.name} stack needs {', '.join(needed)}, which failed to "
                         "build", hint="see the build output above; `invoke doctor` lists "
                         "missing tools and headers")
    return outcome.check_seconds


def _uv_or_none() -> str | None:
    try:
        return tools.find_uv()
    except ToolchainError:
        return None


def _pip_install(python: Path, base: str, *args: str) -> tuple[str, ...]:
    """An install into the venv of ``python``: ``uv pip install``, or without uv (the GPU
    machine has none) the base interpreter's own pip, pointed at the venv (``--python``)."""
    uv = _uv_or_none()
    if uv:
        return (uv, "pip", "install", "--python", str(python), *args)
    swapped = ["--force-reinstall" if a == "--reinstall" else a for a in args]
    return (base, "-m", "pip", "--python", str(python), "install",
            "--disable-pip-version-check", *swapped)


def resolving_installer(python: Path, base: str, torch_through_pth: bool) -> Installer:
    """The installer for anything resolved against the venv's torch (the stack wheels' runtime
    requirements, the checkout's requirements). Where torch comes through the .pth (a combo
    with its own interpreter) it is that interpreter's pip even when uv is here: pip counts
    what the .pth makes importable as installed, uv reads the venv's own site-packages only,
    so it would look for a second torch on the index and refuse timm or peft (seen on the
    H200, where uv was on PATH and no index was reachable)."""
    if torch_through_pth:
        return lambda *a: (base, "-m", "pip", "--python", str(python), "install",
                           "--disable-pip-version-check", *a)
    return lambda *a: _pip_install(python, base, *a)


def _venv_with_torch(req: SetupRequest, combo: Combo, target: Target, out: Console) -> Path:
    """Create (or reuse) the venv; give it the combo's torch: installed by uv, or for a combo
    with its own interpreter (the GPU machine, no network) visible through a .pth file.
    Without uv (only possible with such an interpreter) the stdlib's venv makes it. Under
    emulation the venv's Python is the target's (``target.base_python``)."""
    uv = _uv_or_none()
    base = target.python()
    env = target.step_env()
    reused = (req.venv / "pyvenv.cfg").exists()
    if uv:
        # no --seed: seeding pip needs an index, and the GPU machine has no network
        run(Step((uv, "venv", "--allow-existing", "--python", base, str(req.venv)), env,
                 description=f"create the venv {req.venv}"), error=EnvError)
    elif not combo.interpreter:
        tools.find_uv()          # raises: installing the combo's torch needs uv
    elif not reused:
        run(Step((base, "-m", "venv", "--without-pip", str(req.venv)), env,
                 description=f"create the venv {req.venv} (no uv here: python -m venv)"),
            error=EnvError)
    python = req.venv / "bin" / "python"
    if combo.interpreter:
        _link_site_packages(python, Path(base))
        what = f"torch from {base}"
    else:
        run(Step((uv, "pip", "install", "--python", str(python), *venv.index_args(combo),
                  f"torch=={combo.torch}"), env, description=f"install torch {combo.torch}"),
            error=EnvError)
        what = f"torch {combo.torch}"
    out.print(Text(f"venv {'reused' if reused else 'created'}: {req.venv} ({what})"))
    return python


def _link_site_packages(python: Path, base: Path) -> None:
    """A ``.pth`` naming ``base``'s site directories: its torch (and everything else it has)
    becomes importable in the venv, after the venv's own packages."""
    probe = "import json, site, sysconfig; print(json.dumps([sysconfig.get_paths()['purelib'], *site.getsitepackages()]))"
    import json
    theirs = dict.fromkeys(json.loads(capture([str(base), "-c", probe])))
    ours = Path(json.loads(capture([str(python), "-c", probe]))[0])
    (ours / "_cuforge_base.pth").write_text("".join(f"{d}\n" for d in theirs))


def installable(p: Setup) -> tuple[list[tuple[Recipe, Path]], list[str]]:
    """The (recipe, wheel) pairs to install, and the optional packages left out (with why).
    A required package without a wheel is an error; one recorded as skipped (no kernels for
    these arches) installs nothing."""
    latest = p.house.latest()
    wheels: list[tuple[Recipe, Path]] = []
    left_out: list[str] = []
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
            raise MissingWheelError(f"{r.name} has no wheel in {p.house.dir}",
                             hint=f"cuforge build --combo {p.combo.id} --only {r.name}")
    return wheels, left_out


def _install_wheels(python: Path, p: Setup, out: Console, index: IndexOptions) -> list[str]:
    """The stack's wheels without dependency resolution (their pins name each other and torch),
    then those of their runtime requirements the venv does not already see, torch left out.
    Returns the constraint lines that hold torch and these wheels from now on."""
    from cuforge.publish.wheelmeta import wheel_requirements
    base, env = p.target.python(), p.target.step_env()
    pairs, left_out = installable(p)
    wheels = [w for _, w in pairs]
    ours = {canonicalize_name(w.name.split("-")[0]) for w in wheels} | {"torch"}
    wanted = {req for w in wheels for req in wheel_requirements(w)
              if canonicalize_name(Requirement(req).name) not in ours}
    run(Step(_pip_install(python, base, "--no-deps", "--reinstall", *map(str, wheels)), env,
             description=f"install the {p.stack.name} wheels"), error=EnvError)
    held = constraints([("torch", dist_version(python, "torch", env)),
                        *(_name_version(w) for w in wheels)])
    extra = sorted(missing_requirements(python, wanted, env))
    if extra:
        with tempfile.TemporaryDirectory(prefix="cuforge-held-") as tmp:
            cfile = Path(tmp) / "constraints.txt"
            cfile.write_text("".join(f"{line}\n" for line in held))
            installer = resolving_installer(python, base, bool(p.combo.interpreter))
            run(Step(installer("-c", str(cfile), *index.args(), *extra), env,
                     description="their runtime requirements"), error=EnvError)
    out.print(Text(f"installed {len(wheels)} wheels from {p.house.dir}"
                   + (f" (+ {', '.join(extra)})" if extra else "")))
    for note in left_out:
        out.print(Text(f"left out: {note}", style="yellow"))
    return held


def _name_version(wheel: Path) -> tuple[str, str]:
    name, version, _, _ = parse_wheel_filename(wheel.name)
    return str(name), str(version)


def dist_version(python: Path, name: str, env: tuple[tuple[str, str], ...] = ()) -> str:
    """The full version (local label included) of distribution ``name`` seen by ``python``."""
    code = f"from importlib.metadata import version; print(version({name!r}))"
    return capture([str(python), "-c", code], error=ToolchainError, env=dict(env)).strip()


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


def _install_checkout_requirements(python: Path, p: Setup, req: SetupRequest, held: list[str],
                                   out: Console):
    from cuforge.env.checkoutreqs import install
    reqs = checkout_requirements(p.stack, req.checkout)
    if not reqs:
        return []
    base = p.target.python()
    out.print(Text(f"the checkout's requirements ({len(reqs)}), held: {' '.join(held)}"))
    installer = resolving_installer(python, base, bool(p.combo.interpreter))
    got = install(installer, reqs, held, req.index,
                  torch_version=lambda: dist_version(python, "torch", p.target.step_env()),
                  python=p.combo.python, platform=p.combo.target.name,
                  env=p.target.environ())
    out.print(Text(f"installed the checkout's requirements: "
                   f"{', '.join(r.spec for r in got.installed) or 'none'}"
                   + (f" (added: {got.would_install})" if got.would_install else "")))
    for m in got.missing:
        out.print(Text(f"not installed: {m.line()}", style="yellow"))
    return list(got.missing)


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
    latest = p.house.latest()
    held = constraints([("torch", p.combo.torch + (" (as installed)" if p.combo.interpreter
                                                   else "")),
                        *(_name_version(p.house.dir / e.wheel)
                          for r in p.recipes if _usable(p.house, e := latest.get(r.name)))])
    out.print(Text(f"   then the checkout's requirements ({len(reqs)}), from "
                   f"{p.stack.requirements_file or p.stack.file.name}:"))
    for r in reqs:
        out.print(Text(f"     {r.spec}  ({r.source})"))
    out.print(Text(f"   constraint (torch and the stack's wheels held): {' '.join(held)}"))
    if req.index.args():
        out.print(Text(f"   index options: {' '.join(req.index.args())} (and the installer's "
                       "own PIP_*/UV_* settings)"))


def missing_requirements(python: Path, reqs: set[str],
                         env: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """``reqs`` that no distribution visible to ``python`` satisfies. Visible includes what a
    .pth adds (the combo interpreter's packages), which uv alone would not count: so an
    offline machine is never sent to an index for numpy it already has."""
    import json
    code = ("import json, importlib.metadata as m; print(json.dumps({d.metadata['Name']: "
            "d.version for d in m.distributions() if d.metadata['Name']}))")
    answer = capture([str(python), "-c", code], env=dict(env))
    have = {canonicalize_name(k): v for k, v in json.loads(answer).items()}
    missing = []
    for text in reqs:
        req = Requirement(text)
        version = have.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            missing.append(text)
    return missing


def _patch(project: Project, req: SetupRequest, stack: Stack, out: Console) -> None:
    if not stack.patch_set:
        return
    from cuforge.patching.commands import run_patch_command
    run_patch_command(stack.patch_set, req.checkout, check=False, revert=False,
                      dry_run=req.dry_run, patches_dir=project.patches_dir, console=out)


def write_env(venv_dir: Path, stack: Stack) -> Path:
    """Write the env file and hook it into ``bin/activate`` (replacing an earlier hook of the
    same stack, so running setup again changes nothing)."""
    path = env_file(venv_dir, stack.name)
    _atomic_write(path, env_file_text(stack))
    activate = venv_dir / "bin" / "activate"
    text = activate.read_text()
    begin, end = HOOK_BEGIN.format(name=stack.name), HOOK_END.format(name=stack.name)
    text = re.sub(rf"\n?{re.escape(begin)}.*?{re.escape(end)}\n", "\n", text, flags=re.S)
    hook = f"{begin}\n. {_sh_quote(path)}\n{end}\n"
    _atomic_write(activate, text.rstrip("\n") + "\n\n" + hook)
    return path


def _sh_quote(path: Path) -> str:
    import shlex
    return shlex.quote(str(path))


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)


# -- the model stage ---------------------------------------------------------------------------
@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """The stack's variables for the checks' subprocesses (what activation sets)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def stack_modules(p: Setup) -> list[str]:
    """What the import stage imports: each recipe's ``modules`` (else its wheel's own)."""
    from cuforge.verify.wheel import default_modules, unpack
    names: list[str] = []
    for r, wheel in installable(p)[0]:
        if r.modules:
            names += r.modules
            continue
        with tempfile.TemporaryDirectory() as tmp:
            names += default_modules(unpack(wheel, Path(tmp)))
    return list(dict.fromkeys(names))


_STAGE = """{load_module}
import json
print({mark!r}, "torch", flush=True)
import torch
for name in {modules!r}:
    print({mark!r}, name, flush=True)
    load_module(name)
print({mark!r}, "done", flush=True)
gpu = torch.cuda.is_available()
print("CUFORGE-GPU", json.dumps(torch.cuda.get_device_name(0) if gpu else None), flush=True)
"""


def model_stage(project: Project, python: Path, p: Setup, out: Console, *,
                checkout: Path) -> bool:
    """In the venv, with the stack's variables: import torch and every wheel's modules in one
    process (and ask it for a GPU), then, when there is one, the stack's ``checkout_model``
    script on ``checkout`` (the user's own model code: PTv3, MILo's renderer)."""
    import json

    from cuforge.verify import host
    from cuforge.verify._proc import run_python
    from cuforge.verify.importer import LOAD_MODULE, MARK, interpret
    from cuforge.verify.report import CheckResult
    from cuforge.verify.smoke import run_smoke
    modules = stack_modules(p)
    runs_with = dict(p.target.step_env())   # what the venv's Python needs (emulation)
    # one interpreter with torch for both runs (each a child of it): the import stage's and
    # the checkout model's torch import were seconds of every setup
    with _environ({v.name: v.value for v in p.stack.env}), \
            host.serving(python, runs_with, enabled=not p.target.emulated):
        outcome = run_python(python, ["-c", _STAGE.format(load_module=LOAD_MODULE, mark=MARK,
                                                         modules=modules)], env=runs_with)
        imported = interpret(outcome, timeout=300)
        results = {"import": imported if imported.status == "fail" else
                   CheckResult("import", "pass", f"torch + {len(modules)} modules together")}
        gpu = next((json.loads(ln.split(" ", 1)[1]) for ln in outcome.stdout.splitlines()
                    if ln.startswith("CUFORGE-GPU ")), None)
        if not p.stack.checkout_model or imported.status == "fail":
            pass
        elif gpu is None:
            results["checkout model"] = CheckResult(
                "checkout model", "skipped", f"skipped: no GPU (torch.cuda.is_available() is "
                f"False in {python}); run `cuforge setup {p.stack.name}` again on the GPU machine")
        else:
            ran = run_smoke(python, project.root / p.stack.checkout_model, [],
                            args=[str(checkout.resolve())], timeout=900, env=runs_with)
            results["checkout model"] = CheckResult("checkout model", ran.status,
                                                    f"{ran.detail} on {gpu}")
    summary = {name: r.detail if r.detail.startswith(r.status) else
               f"{r.status}: {r.detail}" if r.detail else r.status for name, r in results.items()}
    out.print(verdict_line(f"model stage ({p.stack.name})", summary, reason_width=200))
    failed = [r for r in results.values() if r.status == "fail"]
    for r in failed:
        out.print(Text(r.detail, style="red"))
    ran = results.get("checkout model")
    if ran is not None and ran.status == "pass":     # what it compared, with the numbers
        out.print(Text(f"checkout model: {ran.detail}"))
    return not failed
