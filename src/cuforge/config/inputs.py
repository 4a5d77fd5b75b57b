"""A command's inputs, checked before anything is written: the one set of checks that the dry
run and the real run both make (``pipeline.executor.check_build`` and
``workstation.decision.check_setup`` gather them with the env's and the wheelhouse's own,
which sit in the layers above: ``env.resolve.check_combo_env``,
``publish.writable.check_wheelhouse``), so ``--dry-run`` fails where the run would, with the
same line and exit code, and a refused input leaves no env, lock, stamp or manifest line behind (``pip install
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


def check_options(jobs: int | None, src_overrides: tuple[tuple[str, Path], ...],
                  team_wheels: str) -> None:
    """A build's own options, cheapest first: ``--jobs``, ``--src``, ``--wheels``."""
    check_jobs(jobs)
    check_src_overrides(src_overrides)
    if team_wheels:
        check_team_wheels(team_wheels)


def check_venv_path(path: Path) -> None:
    """``setup --venv``: a directory to create or reuse, never an existing file."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--venv {path} is a file, not a venv directory",
                          hint="pass a directory (created if missing), or leave --venv out "
                               "for CHECKOUT/.venv")


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
