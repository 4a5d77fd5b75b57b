"""Run a Python subprocess for a check and keep what a verdict needs: exit code, signal,
timeout, output. Unlike ``cuforge.runner`` (which turns failures into errors) a crash here is
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

from ..runner import OUTSIDE_SIGNALS, Interrupted, exit_status, stop, supervised


@dataclass(frozen=True)
class Outcome:
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
               plain_loader: bool = False, cwd: Path | None = None) -> Outcome:
    """Run ``python args...`` with ``paths`` importable, in a scratch cwd (so nothing in the
    caller's directory shadows the wheel) or in ``cwd``, under cuforge's supervisor: it ends
    on timeout, on an interrupt, and when cuforge dies, with whatever it started."""
    with tempfile.TemporaryDirectory(prefix="cuforge-run-") as scratch, \
            supervised([str(python), *args], cwd=cwd or Path(scratch),
                       env=python_env(paths, env, plain_loader=plain_loader)) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(proc)   # the supervisor ends the interpreter and whatever it started
            out, err = proc.communicate()
            return Outcome(None, out, err, timed_out=True)
    code = exit_status(proc.returncode)
    if -code in OUTSIDE_SIGNALS:   # killed, by cuforge's interrupt or from outside: no verdict
        raise Interrupted(f"the check `{python.name} {' '.join(args)[:60]}` was stopped by "
                          f"{signal.Signals(-code).name}; no verdict was recorded")
    return Outcome(code, out, err)
