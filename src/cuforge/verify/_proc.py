"""Run a Python subprocess for a check and keep what a verdict needs: exit code, signal,
timeout, output. Unlike ``cuforge.core.runner`` (which turns failures into errors) a crash here is
data: the check reports it.

>>> describe_exit(-11)
'crashed with SIGSEGV'
>>> describe_exit(3)
'exited with code 3'
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cuforge.core.runner import OUTSIDE_SIGNALS, Interrupted, exit_status, stop, supervised


@dataclass(frozen=True)
class ProcessResult:
    """How a subprocess ended. ``returncode`` is None when it was killed for a timeout."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def crashed(self) -> bool:
        """Killed by a signal (segfault, abort, ...)."""
        return self.returncode is not None and self.returncode < 0


def describe_exit(returncode: int) -> str:
    """A person's words for an exit status: a negative code is a signal."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"crashed with {name}"
    return f"exited with code {returncode}"


def last_error_line(text: str) -> str:
    """The last non-empty line of a traceback (``ImportError: undefined symbol: ...``)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def python_env(paths: Sequence[Path], extra: Mapping[str, str] | None = None, *,
               plain_loader: bool = False) -> dict[str, str]:
    """The environment for a check subprocess: ``paths`` first on ``sys.path``, no user site
    (so ~/.local cannot shadow the wheel), no .pyc files written into the unpacked wheel;
    ``extra`` variables on top. ``plain_loader``: no ``LD_LIBRARY_PATH`` either, so libraries
    resolve as in a fresh venv."""
    env = {**os.environ, **(extra or {})}
    if plain_loader:
        env.pop("LD_LIBRARY_PATH", None)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), *([old] if old else [])])
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a crash prints the Python stack on stderr
    return env


def run_python(python: Path, args: Sequence[str], *, paths: Sequence[Path] = (),
               timeout: float = 300, env: Mapping[str, str] | None = None,
               plain_loader: bool = False, cwd: Path | None = None) -> ProcessResult:
    """Run ``python args...`` with ``paths`` importable, in a scratch cwd (so nothing in the
    caller's directory shadows the wheel) or in ``cwd``, under cuforge's supervisor: it ends
    on timeout, on an interrupt, and when cuforge dies, with whatever it started. Inside
    ``check_host.serving(python)`` a ``-c CODE`` run is a child of that interpreter's check
    host."""
    hosted = _run_hosted(python, args, paths=paths, timeout=timeout, env=env,
                         plain_loader=plain_loader) if cwd is None else None
    if hosted is not None:
        return hosted
    with tempfile.TemporaryDirectory(prefix="cuforge-run-") as scratch, \
            supervised([str(python), *args], cwd=cwd or Path(scratch),
                       env=python_env(paths, env, plain_loader=plain_loader)) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(proc)   # the supervisor ends the interpreter and whatever it started
            out, err = proc.communicate()
            return ProcessResult(None, out, err, timed_out=True)
    return ProcessResult(_not_stopped(exit_status(proc.returncode), python, args), out, err)


def _run_hosted(python: Path, args: Sequence[str], *, paths: Sequence[Path], timeout: float,
                env: Mapping[str, str] | None, plain_loader: bool) -> ProcessResult | None:
    """The run as a child of a check host, or None when there is none for it."""
    from cuforge.verify.check_host import HostGone, pool_for
    pool = pool_for(python)
    if pool is None or len(args) < 2 or args[0] != "-c":
        return None
    # the host's key: what its loader and torch see at start; PYTHONSAFEPATH only matters to
    # the processes a check starts, which get it from the request's own environment
    at_start = {k: v for k, v in (env or {}).items() if k != "PYTHONSAFEPATH"}
    check_host = pool.check_host(torch=not plain_loader,
                                 env=python_env((), at_start, plain_loader=plain_loader))
    if check_host is None:
        return None
    try:
        code, out, err = check_host.run(args[1], args[2:], paths=paths, timeout=timeout,
                                        env=python_env(paths, env, plain_loader=plain_loader))
    except HostGone:
        return None
    return ProcessResult(_not_stopped(code, python, args), out, err, timed_out=code is None)


def _not_stopped(code: int | None, python: Path, args: Sequence[str]) -> int | None:
    """``code`` unless a signal from outside ended the check (cuforge's interrupt or a kill):
    that is no verdict on the wheel, so it is raised as an interrupt instead."""
    if code is not None and -code in OUTSIDE_SIGNALS:
        raise Interrupted(f"the check `{python.name} {' '.join(args)[:60]}` was stopped by "
                          f"{signal.Signals(-code).name}; no verdict was recorded")
    return code
