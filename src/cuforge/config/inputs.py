"""A command's inputs, checked before anything is written: the one set of checks that the dry
run and the real run both make (``pipeline.executor.build`` and ``workstation.setup.setup``
call these first), so ``--dry-run`` fails where the run would, with the same line and exit
code, and a refused input leaves no env, lock, stamp or manifest line behind (``pip install
--dry-run`` resolves as the install does).

>>> check_jobs(4)
>>> check_jobs(0)
Traceback (most recent call last):
...
cuforge.core.errors.ConfigError: --jobs 0: the number of parallel compile jobs must be 1 or more
  fix: leave --jobs out to get min(cores, free memory / 2.5 GB), or pass e.g. --jobs 4
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from cuforge.core.errors import ConfigError


def check_jobs(jobs: int | None) -> None:
    """``--jobs``: absent (None) means the machine's default; given, at least 1."""
    if jobs is not None and jobs < 1:
        raise ConfigError(f"--jobs {jobs}: the number of parallel compile jobs must be 1 "
                          "or more", hint="leave --jobs out to get min(cores, free memory / "
                          "2.5 GB), or pass e.g. --jobs 4")


def check_directory(path: Path, what: str, *, hint: str) -> None:
    """``path`` is an existing directory; else one ConfigError that says which it is not."""
    if not path.exists():
        raise ConfigError(f"{what}: {path} does not exist", hint=hint)
    if not path.is_dir():
        raise ConfigError(f"{what}: {path} is not a directory", hint=hint)


def check_src_overrides(srcs: tuple[tuple[str, Path], ...]) -> None:
    """``--src NAME=PATH``: each PATH is a checkout, a directory."""
    for name, path in srcs:
        check_directory(path, f"--src {name}={path}",
                        hint=f"pass the directory of your {name} checkout (the one with its "
                             "setup.py or pyproject.toml)")


def local_path(source: str) -> Path | None:
    """The directory ``--wheels`` names (a path or a ``file://`` URL), or None for a URL."""
    if source.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(source).path))
    if "://" in source:
        return None
    return Path(source).expanduser()


def check_team_wheels(spec: str) -> None:
    """``--wheels DIR`` (or ``file://``): a directory that is there. A URL is read when the
    build asks for its wheels (``teamwheels``)."""
    path = local_path(spec) if spec else None
    if path is not None:
        check_directory(path, f"--wheels {spec}",
                        hint="pass the directory `cuforge build` publishes to, its simple/ "
                             "index, or an index URL (http://host:8080/simple/)")


def check_venv_path(path: Path) -> None:
    """``setup --venv``: a directory to create or reuse, never an existing file."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--venv {path} is a file, not a venv directory",
                          hint="pass a directory (created if missing), or leave --venv out "
                               "for CHECKOUT/.venv")


def check_combo_env(state_dir: Path, combo, target) -> None:
    """The combo's env can be had: its emulator works (a combo of another platform), and an
    env not made yet resolves (its torch and toolkit exist for its platform: ``--torch 9.9``
    is refused here, not after a venv was half made). An existing env or interpreter is
    checked where it is read (``venv.prepare``, ``venv.inspect``)."""
    from cuforge.env.resolve import require_resolvable
    target.require_usable()
    require_resolvable(state_dir, combo)


def check_wheelhouse(project, combo) -> None:
    """The combo's wheelhouse directory can be written (read-only, not ours or a full disk:
    exit 9 now, naming the option that chose it, not after the compile)."""
    from cuforge.publish.writable import check_writable
    check_writable(combo.wheel_dir(project.wheelhouse), project.wheelhouse_named_by)


def check_build(project, req) -> None:
    """Everything of a ``build`` request that can be refused before anything is written,
    cheapest first: the same for ``--dry-run``."""
    check_jobs(req.jobs)
    check_src_overrides(req.src_overrides)
    if req.team_wheels:
        check_team_wheels(req.team_wheels)
    check_wheelhouse(project, req.combo)
    check_combo_env(project.state_dir, req.combo, req.target)


def check_checkout(path: Path, stack) -> None:
    """``setup --checkout``: a clone of the stack's code base (``stacks/*.toml``: its repo and
    the path every checkout of it has), not an empty or unrelated directory."""
    clone = f"git clone {stack.repo} {path}" if stack.repo else "git clone ..."
    if not path.exists():
        raise ConfigError(f"no checkout at {path}",
                          hint=f"pass --checkout PATH to your clone of {stack.title} ({clone})")
    if not path.is_dir():
        raise ConfigError(f"--checkout {path} is not a directory",
                          hint=f"pass the root of your clone of {stack.title} ({clone})")
    if stack.checkout_marker and not (path / stack.checkout_marker).exists():
        raise ConfigError(f"{path} is not a {stack.title} checkout (no "
                          f"{stack.checkout_marker} in it)",
                          hint=f"pass the root of your clone of {stack.title} ({clone})")


def check_setup(project, req, stack) -> None:
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
