"""What setup puts into the user's venv: the venv itself with the combo's torch, the stack's
wheels without dependencies and their runtime requirements, the checkout's own requirements,
each with torch (and what is installed already) held (docs/workstation.md's table)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from rich.console import Console
from rich.text import Text

from cuforge.config.combos import Combo
from cuforge.env.target import Target
from cuforge.core.errors import EnvError, ToolchainError
from cuforge.core.runner import Step, capture, run
from cuforge.env import programs, venv
from cuforge.env.checkoutreqs import (CheckoutRequirement, IndexOptions, Installer,
                                      RequirementsOutcome, constraints)
from cuforge.workstation.decision import (Setup, SetupRequest, checkout_requirements,
                                          installable, name_version)


def _uv_or_none() -> str | None:
    try:
        return programs.find_uv()
    except ToolchainError:
        return None


def pip_install(python: Path, base: str, *args: str) -> tuple[str, ...]:
    """An install into the venv of ``python``: ``uv pip install``, or without uv (the GPU
    machine has none) the base interpreter's own pip, pointed at the venv (``--python``)."""
    uv = _uv_or_none()
    if uv:
        return (uv, "pip", "install", "--python", str(python), *args)
    swapped = ["--force-reinstall" if a == "--reinstall" else a for a in args]
    return _pip(python, base, *swapped)


def _pip(python: Path, base: str, *args: str) -> tuple[str, ...]:
    """pip into the venv of ``python``, writing no bytecode: uv writes none either, and
    compiling every module of transformers or wandb one after another was most of pip's time
    (a module is compiled when first imported instead)."""
    return (base, "-m", "pip", "--python", str(python), "install",
            "--disable-pip-version-check", "--no-compile", *args)


def resolving_installer(python: Path, base: str, torch_through_pth: bool) -> Installer:
    """The installer for anything resolved against the venv's torch (the stack wheels' runtime
    requirements, the checkout's requirements). Where torch comes through the .pth (a combo
    with its own interpreter) it is that interpreter's pip even when uv is here: pip counts
    what the .pth makes importable as installed, uv reads the venv's own site-packages only,
    so it would look for a second torch on the index and refuse timm or peft (seen on the
    H200, where uv was on PATH and no index was reachable)."""
    if torch_through_pth:
        return lambda *a: _pip(python, base, *a)
    return lambda *a: pip_install(python, base, *a)


def venv_with_torch(req: SetupRequest, combo: Combo, target: Target, out: Console) -> Path:
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
        programs.find_uv()          # raises: installing the combo's torch needs uv
    elif not reused:
        run(Step((base, "-m", "venv", "--without-pip", str(req.venv)), env,
                 description=f"create the venv {req.venv} (no uv here: python -m venv)"),
            error=EnvError)
    python = req.venv / "bin" / "python"
    if combo.interpreter:
        link_site_packages(python, Path(base))
        what = f"torch from {base}"
    else:
        run(Step((uv, "pip", "install", "--python", str(python), *venv.index_args(combo),
                  f"torch=={combo.torch}"), env, description=f"install torch {combo.torch}"),
            error=EnvError)
        what = f"torch {combo.torch}"
    out.print(Text(f"venv {'reused' if reused else 'created'}: {req.venv} ({what})"))
    return python


def link_site_packages(python: Path, base: Path) -> None:
    """A ``.pth`` naming ``base``'s site directories: its torch (and everything else it has)
    becomes importable in the venv, after the venv's own packages."""
    probe = "import json, site, sysconfig; print(json.dumps([sysconfig.get_paths()['purelib'], *site.getsitepackages()]))"
    theirs = dict.fromkeys(json.loads(capture([str(base), "-c", probe])))
    ours = Path(json.loads(capture([str(python), "-c", probe]))[0])
    (ours / "_cuforge_base.pth").write_text("".join(f"{d}\n" for d in theirs))


def install_wheels(python: Path, p: Setup, out: Console, index: IndexOptions) -> list[str]:
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
    run(Step(pip_install(python, base, "--no-deps", "--reinstall", *map(str, wheels)), env,
             description=f"install the {p.stack.name} wheels"), error=EnvError)
    held = constraints([("torch", dist_version(python, "torch", env)),
                        *(name_version(w) for w in wheels)])
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


def dist_version(python: Path, name: str, env: tuple[tuple[str, str], ...] = ()) -> str:
    """The full version (local label included) of distribution ``name`` seen by ``python``."""
    code = f"from importlib.metadata import version; print(version({name!r}))"
    return capture([str(python), "-c", code], error=ToolchainError, env=dict(env)).strip()


def install_checkout_requirements(python: Path, p: Setup, req: SetupRequest, held: list[str],
                                  out: Console, reqs: list[CheckoutRequirement] | None = None
                                  ) -> RequirementsOutcome:
    from cuforge.env.checkoutreqs import install
    reqs = checkout_requirements(p.stack, req.checkout) if reqs is None else reqs
    if not reqs:
        return RequirementsOutcome((), ())
    base = p.target.python()
    out.print(Text(f"the checkout's requirements ({len(reqs)}), held: {' '.join(held)}"))
    installer = resolving_installer(python, base, bool(p.combo.interpreter))
    got = install(installer, reqs, held, req.index,
                  torch_version=lambda: dist_version(python, "torch", p.target.step_env()),
                  python=p.combo.python, platform=p.combo.target_platform.name,
                  env=p.target.environ())
    out.print(Text(f"installed the checkout's requirements: "
                   f"{', '.join(r.spec for r in got.installed) or 'none'}"
                   + (f" (added: {got.would_install})" if got.would_install else "")))
    for m in got.missing:
        out.print(Text(f"not installed: {m.line()}", style="yellow"))
    return got


def missing_requirements(python: Path, reqs: set[str],
                         env: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """``reqs`` that no distribution visible to ``python`` satisfies. Visible includes what a
    .pth adds (the combo interpreter's packages), which uv alone would not count: so an
    offline machine is never sent to an index for numpy it already has."""
    code = ("import json, importlib.metadata as m; print(json.dumps([[d.metadata['Name'], "
            "d.version] for d in m.distributions() if d.metadata['Name']]))")
    answer = capture([str(python), "-c", code], env=dict(env))
    have: dict[str, str] = {}
    for name, version in json.loads(answer):   # in sys.path order: the first one is imported,
        have.setdefault(canonicalize_name(name), version)   # a copy behind it is shadowed
    missing = []
    for text in reqs:
        req = Requirement(text)
        version = have.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            missing.append(text)
    return missing
