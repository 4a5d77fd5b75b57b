"""Where cuforge runs its build, install and verification commands: argument lists, an
explicit environment, a log file, live streaming on request, each command under the supervisor
(it ends the command's whole tree when cuforge dies), and failures turned into clean errors
with the log's tail (``run``, ``start``, ``supervised``; ``capture`` for a quick query).

Not every process starts here. These modules call ``subprocess`` or ``os.exec*`` themselves
(``tests/unit/test_process_runners.py`` holds this list to the code), each for its reason:

- a short query or probe whose exit code or output is the answer, with nothing to log:
  ``pipeline/sources.py`` (git's plumbing), ``env/toolchain.py`` (``nvcc --dryrun``),
  ``env/hostcxx.py`` (the compiler probe), ``env/builddeps.py`` (an import probe),
  ``env/programs.py`` (``uv python find``), ``verify/symbols.py`` (``ldconfig -p``),
  ``core/elf.py`` (``c++filt``), ``pipeline/compiler_cache.py`` (sccache's client, with its
  own timeout; its server starts here, ``start``);
- an install whose failure is a reason, not a build error: ``env/unpacked.py`` (a wheel
  unpacked once: the CCCL overlay, the PyPI compute-sanitizer), ``env/checkoutreqs.py`` (a
  checkout's requirements: pip's words are read), ``verify/upstream.py`` (uv's install where
  the env has no pip);
- the emulation root, as root: ``env/rootrun.py`` (``unshare``, ``mount``, then the command
  exec'd inside the root), ``env/emulation_setup.py`` (binfmt_misc's mount, dpkg-query,
  ``qemu --version``, the root's Python);
- cuforge replaced by another program: ``workstation/shell.py`` (the user's shell, exec'd);
- not cuforge's process at all: ``pipeline/builders/pep517.py`` (the PEP 517 hook runner,
  inside the build command this module runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from cuforge.core.console import plural
from cuforge.core.errors import BuildError, CuforgeError

TAIL_LINES = 40
# installer lines a person does not read: pip and uv repeat each satisfied requirement with
# its whole pin (torch's is ~600 characters); they stay in the log, not on screen or in a tail
UNREAD = ("Requirement already satisfied:", "Requirement already up-to-date:")
SUPERVISOR = Path(__file__).resolve().parent / "supervisor.py"
_LIVE: set[subprocess.Popen] = set()     # running commands (packages build side by side)
_LIFELINES: dict[int, int] = {}          # supervisor pid -> the write end of its lifeline
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()   # set by stop_all: an interrupted build starts nothing more
# descriptors the supervisors of this context's commands keep open (``hold``)
_held: ContextVar[tuple[int, ...]] = ContextVar("cuforge_held_fds", default=())

# Who wants each output line as it arrives (a progress bar reading ninja's [n/N]): set with
# ``listen``, so callers that build steps need not thread a callback through.
_listener: ContextVar[Callable[[str], None] | None] = ContextVar("cuforge_line_listener",
                                                                 default=None)

# Signals sent from outside (a user's Ctrl-C or kill, a session's end, cuforge's own stop_all):
# a command ended by one was stopped, it did not fail
OUTSIDE_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL})


class Interrupted(KeyboardInterrupt):
    """A command was stopped from outside, not ended by what it ran: whatever it was deciding
    (a check's verdict on a wheel) has no outcome. It unwinds like Ctrl-C, past every
    ``except CuforgeError``, so nothing takes it for a failure and nothing is recorded."""


@contextmanager
def listen(callback: Callable[[str], None]) -> Iterator[None]:
    """Within the block, every line any ``run`` reads is also passed to ``callback``."""
    token = _listener.set(callback)
    try:
        yield
    finally:
        _listener.reset(token)


@contextmanager
def package_commands(log: Path, *, holding: int | None = None,
                     on_line: Callable[[str], None] | None = None,
                     notes: Sequence[str] = ()) -> Iterator[None]:
    """The commands one package's thread runs, as one scope: its ``log`` (``<package>.log``)
    begun afresh with cuforge's ``notes``; each command keeps ``holding`` (the work dir's lock)
    open in its supervisor, so the lock lasts until the last of them ended, after a kill of
    cuforge too; each line they print also goes to ``on_line``; and a failure once an interrupt
    stops them is ``Interrupted`` (a command stopped by it failed: no verdict to record)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"\n# {line}\n" for line in notes if line))   # as ``note`` writes
    with hold(holding) if holding is not None else contextlib.nullcontext(), \
            listen(on_line) if on_line is not None else contextlib.nullcontext():
        try:
            yield
        except CuforgeError as err:
            if stopping():
                raise Interrupted(f"{log.stem} was not finished") from err
            raise


@dataclass(frozen=True)
class Step:
    """A command to run: shown verbatim by ``--dry-run``."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()   # variables cuforge sets on top of os.environ
    cwd: Path | None = None
    description: str = ""
    # scripts the command calls (a compiler launcher): (path, text), written executable just
    # before it runs, so planning (and --dry-run) writes nothing
    scripts: tuple[tuple[Path, str], ...] = ()

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
    from cuforge.core.atomic import EXECUTABLE, write_atomic
    for path, text in step.scripts:
        write_atomic(path, text, EXECUTABLE)
    if _STOPPING.is_set():   # another thread was interrupted: this one starts nothing new
        raise error(f"{step.description or shlex.join(step.argv[:3])}: not started, the build "
                    "was interrupted")
    if trace := os.environ.get("CUFORGE_TRACE"):
        with open(trace, "a") as f:
            f.write(json.dumps({"argv": list(step.argv), "env": dict(step.env)}) + "\n")
    env = {**os.environ, **dict(step.env)}
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    captured: list[str] = []
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
    if _resolve(step.argv[0], env, step.cwd) is None:
        raise error(f"command not found: {step.argv[0]}",
                    hint="run `invoke doctor` to see which tool is missing")
    proc = start(step.argv, env=env, cwd=step.cwd, stdout=subprocess.PIPE)
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
        _cut_lifeline(proc)
    if code != 0:
        where = f"\n  full log: {log}" if log else ""
        what = step.description or shlex.join(step.argv[:3])
        # the tail's last line names the cause (pip's "No matching distribution found for X")
        cause = next((ln.strip() for ln in reversed(tail) if ln.strip()), "")
        summary = f"{what} failed (exit {code})" + (f" ... {cause}" if cause else "") + \
            (f"; full log: {log}" if log else "")
        raise error(f"{what} failed (exit {code}); last lines:\n" + "".join(tail).rstrip()
                    + where, summary=summary)
    return "".join(captured if not log else tail)


def note(log: Path, line: str) -> None:
    """One cuforge line (``# ...``) into a package's log, between the commands' output."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as sink:
        sink.write(f"\n# {line}\n")


def stop_all() -> None:
    """Stop every running command's process tree (an interrupt reaches only the main thread;
    commands run by other threads are stopped from there), verification's interpreters
    among them (``supervised``); from now on ``stopping()`` is true and no command starts."""
    _STOPPING.set()
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:   # all at once: each supervisor ends its tree in parallel
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        _stop_group(proc)


def stopping() -> bool:
    """True once ``stop_all`` ran: what a build thread finishes after an interrupt is not
    published."""
    return _STOPPING.is_set()


def resume() -> None:
    """Start commands again (a new build in the same process, after an interrupted one)."""
    _STOPPING.clear()


@contextlib.contextmanager
def session() -> Iterator[None]:
    """A build's commands: they may start (after an earlier build in this process was
    interrupted), and an interrupt of the block stops every one of them (Ctrl-C and SIGTERM
    reach the main thread only; the commands run in worker threads)."""
    resume()
    try:
        yield
    except BaseException:
        stop_all()
        raise


def _pump(proc: subprocess.Popen, step: Step, log: Path | None, stream: bool,
          tail: deque[str], captured: list[str], timeout: float | None, prefix: str) -> int:
    # line-buffered: a cuforge killed alone (SIGKILL) leaves the log complete up to its last
    # line, and whoever watches it (the bench's kill at half) sees ninja's progress as it comes
    with open(log, "a", buffering=1) if log else _NullFile() as sink:
        if log:
            sink.write(f"\n$ {step.render()}\n")
        assert proc.stdout is not None
        listener = _listener.get()
        satisfied = 0
        for line in proc.stdout:
            if log:
                sink.write(line)
            else:
                captured.append(line)
            if listener:
                listener(line)
            if not shown(line):
                satisfied += 1
                continue
            if satisfied:   # once, where they were: how many were left out
                tail.append(f"({plural(satisfied, 'requirement')} already satisfied)\n")
                satisfied = 0
            tail.append(line)
            if stream:
                sys.stdout.write(prefix + line)
                sys.stdout.flush()
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return -9


def shown(line: str) -> bool:
    """False for an installer line a person does not read (``UNREAD``).

    >>> shown("Requirement already satisfied: numpy in ./site-packages (2.4.6)"), shown("ok")
    (False, True)
    """
    return not line.lstrip().startswith(UNREAD)


def start(argv, *, env: dict[str, str], cwd: Path | None = None, stdout=None,
          stderr=subprocess.STDOUT) -> subprocess.Popen:
    """Start ``argv`` under the supervisor (``supervisor.py``): a process of its own session
    that holds the only read end of a pipe whose write end stays here. However this process
    ends, the kernel closes the pipe and the supervisor ends the command's whole tree, so no
    compiler outlives cuforge. The work dirs this thread has locked (``hold``) are passed on,
    so a next build of the package waits until the tree is gone."""
    read, write = os.pipe()   # both ends close-on-exec: no other child gets the write end
    try:
        proc = subprocess.Popen([sys.executable, "-I", str(SUPERVISOR), *argv], cwd=cwd,
                                env=env, stdin=read, stdout=stdout, stderr=stderr,
                                text=True, errors="replace", bufsize=1,
                                start_new_session=True, pass_fds=_held.get())
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    with _LIVE_LOCK:
        _LIFELINES[proc.pid] = write
    return proc


@contextmanager
def supervised(argv: Sequence[str], *, env: dict[str, str],
               cwd: Path | None = None) -> Iterator[subprocess.Popen]:
    """``argv`` under the supervisor with stdout and stderr kept apart (verification's
    interpreters: an import check, a smoke test). ``stop_all`` ends it as it ends a build
    command, and a SIGKILL of cuforge alone closes its lifeline, so the supervisor ends it
    too: under emulation such an interpreter is a QEMU process, which once ran on for ~10 s
    after cuforge was killed."""
    proc = start(list(argv), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        yield proc
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
        _cut_lifeline(proc)


def exit_status(code: int) -> int:
    """The command's status as ``subprocess`` gives it: the supervisor reports a command
    killed by signal N as 128 + N, which is -N here (``describe_exit`` says "crashed").

    >>> exit_status(139), exit_status(3), exit_status(0)
    (-11, 3, 0)
    """
    return -(code - 128) if 128 < code < 128 + signal.NSIG else code


def stop(proc: subprocess.Popen) -> None:
    """End a command started with ``start`` and everything below it."""
    _stop_group(proc)


@contextmanager
def hold(fd: int) -> Iterator[None]:
    """Within the block, commands this thread starts keep ``fd`` (a lock's file) open in their
    supervisor: a ``flock`` on it lasts until the last compiler of the build has ended."""
    token = _held.set((*_held.get(), fd))
    try:
        yield
    finally:
        _held.reset(token)


@contextmanager
def holding_nothing() -> Iterator[None]:
    """Commands started in the block keep none of this thread's locks: a helper that outlives
    the package it was started for (the check host) must not hold that package's work dir."""
    token = _held.set(())
    try:
        yield
    finally:
        _held.reset(token)


def _cut_lifeline(proc: subprocess.Popen) -> None:
    with _LIVE_LOCK:
        write = _LIFELINES.pop(proc.pid, None)
    if write is not None:
        os.close(write)


def _stop_group(proc: subprocess.Popen) -> None:
    """Ask the supervisor to end the tree (SIGTERM, then SIGKILL after 2 s; closing the
    lifeline means the same); if it is gone or stuck, kill what is left ourselves."""
    from cuforge.core.supervisor import descendants
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
        return
    except subprocess.TimeoutExpired:
        pass
    for pid in reversed(descendants(proc.pid)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.kill()
    proc.wait()


def _resolve(command: str, env: dict[str, str], cwd: Path | None) -> str | None:
    """Where ``command`` is, as the supervisor's ``posix_spawnp`` will look for it."""
    if os.sep in command:
        path = Path(command) if Path(command).is_absolute() else Path(cwd or ".") / command
        return str(path) if os.access(path, os.X_OK) and path.is_file() else None
    return shutil.which(command, path=env.get("PATH", os.defpath))


def capture(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
            error: type[CuforgeError] = CuforgeError) -> str:
    """Run a quick query command and return stdout; raise ``error`` with stderr on failure."""
    try:
        proc = subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})},
                              capture_output=True, text=True)
    except FileNotFoundError:
        raise error(f"command not found: {argv[0]}") from None
    if proc.returncode != 0:
        failure = error(f"{shlex.join(argv[:4])} failed (exit {proc.returncode}): "
                        f"{proc.stderr.strip()[-2000:]}")
        failure.returncode = proc.returncode
        raise failure
    return proc.stdout


class _NullFile:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, _text: str) -> None:
        pass
