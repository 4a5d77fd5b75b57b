"""The one place that runs subprocesses: argument lists, an explicit environment, a log file,
live streaming on request, and failures turned into clean errors with the log's tail."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from .errors import BuildError, CuforgeError

TAIL_LINES = 40
_LIVE: set[subprocess.Popen] = set()     # running commands (packages build side by side)
_LIVE_LOCK = threading.Lock()

# Who wants each output line as it arrives (a progress bar reading ninja's [n/N]): set with
# ``listen``, so callers that build steps need not thread a callback through.
_listener: ContextVar[Callable[[str], None] | None] = ContextVar("cuforge_line_listener",
                                                                 default=None)


@contextmanager
def listen(callback: Callable[[str], None]) -> Iterator[None]:
    """Within the block, every line any ``run`` reads is also passed to ``callback``."""
    token = _listener.set(callback)
    try:
        yield
    finally:
        _listener.reset(token)


@dataclass(frozen=True)
class Step:
    """A command to run: shown verbatim by ``--dry-run``."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()   # variables cuforge sets on top of os.environ
    cwd: Path | None = None
    description: str = ""

    def render(self) -> str:
        lines = [f"# {self.description}"] if self.description else []
        if self.cwd:
            lines.append(f"cd {shlex.quote(str(self.cwd))}")
        lines += [f"export {k}={shlex.quote(v)}" for k, v in self.env]
        lines.append(shlex.join(self.argv))
        return "\n".join(lines)


def run(step: Step, *, log: Path | None = None, stream: bool = False,
        error: type[CuforgeError] = BuildError, timeout: float | None = None,
        prefix: str = "") -> str:
    """Run ``step``; append its output to ``log``; return the output (last lines when logged).

    On failure raise ``error`` carrying the tail of the output and the log path. Streamed
    lines start with ``prefix`` (the package name, when several build at once).
    ``$CUFORGE_TRACE``, when set, names a file that gets one JSON line per command run.
    """
    if trace := os.environ.get("CUFORGE_TRACE"):
        with open(trace, "a") as f:
            f.write(json.dumps({"argv": list(step.argv), "env": dict(step.env)}) + "\n")
    env = {**os.environ, **dict(step.env)}
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    captured: list[str] = []
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
    try:
        # Own process group, so an interrupted cuforge can stop the whole compiler tree.
        proc = subprocess.Popen(step.argv, cwd=step.cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace",
                                bufsize=1, start_new_session=True)
    except FileNotFoundError:
        raise error(f"command not found: {step.argv[0]}",
                    hint="run `invoke doctor` to see which tool is missing") from None
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        code = _pump(proc, step, log, stream, tail, captured, timeout, prefix)
    except BaseException:
        _stop_group(proc)    # Ctrl-C / SIGTERM: no orphaned nvcc keeps writing into work/
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    if code != 0:
        where = f"\n  full log: {log}" if log else ""
        what = step.description or shlex.join(step.argv[:3])
        raise error(f"{what} failed (exit {code}); last lines:\n" + "".join(tail).rstrip()
                    + where)
    return "".join(captured if not log else tail)


def note(log: Path, line: str) -> None:
    """One cuforge line (``# ...``) into a package's log, between the commands' output."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as sink:
        sink.write(f"\n# {line}\n")


def stop_all() -> None:
    """Stop every running command's process tree (an interrupt reaches only the main thread;
    commands run by other threads are stopped from there)."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        _stop_group(proc)


def _pump(proc: subprocess.Popen, step: Step, log: Path | None, stream: bool,
          tail: deque[str], captured: list[str], timeout: float | None, prefix: str) -> int:
    with open(log, "a") if log else _NullFile() as sink:
        if log:
            sink.write(f"\n$ {step.render()}\n")
        assert proc.stdout is not None
        listener = _listener.get()
        for line in proc.stdout:
            tail.append(line)
            if listener:
                listener(line)
            if log:
                sink.write(line)
            else:
                captured.append(line)
            if stream:
                sys.stdout.write(prefix + line)
                sys.stdout.flush()
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return -9


def _stop_group(proc: subprocess.Popen) -> None:
    """Terminate the child's whole process group, then kill what is left after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def capture(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
            error: type[CuforgeError] = CuforgeError) -> str:
    """Run a quick query command and return stdout; raise ``error`` with stderr on failure."""
    try:
        proc = subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})},
                              capture_output=True, text=True)
    except FileNotFoundError:
        raise error(f"command not found: {argv[0]}") from None
    if proc.returncode != 0:
        raise error(f"{shlex.join(argv[:4])} failed (exit {proc.returncode}): "
                    f"{proc.stderr.strip()[-2000:]}")
    return proc.stdout


class _NullFile:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, _text: str) -> None:
        pass
