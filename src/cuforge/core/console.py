"""What a person sees: safe messages, tables that fit 80 columns, build progress read from
ninja's ``[n/N]`` lines. (A package's line of check verdicts is ``verify.report.verdict_line``:
check results are typed there, and turned into words only when printed.)

Output that is not a terminal (a pipe, a CI log, a package log) is never wrapped: rich would
otherwise break lines at 80 columns in the middle of a path (``CUDA 13.0 at`` / newline /
the toolkit root), and such logs cannot be copied from. :func:`make_console` gives every
command its console: on a terminal rich fits its width, anywhere else lines print whole and
tables take their natural width (``COLUMNS``, when set, still asks for a width).

Every piece of user or data text (package names, paths, error messages such as
``add a [[combo]] table``) goes through ``Text`` or ``escape``: rich markup must never eat it.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TaskID,
                           TextColumn, TimeElapsedColumn)
from rich.table import Table
from rich.text import Text

__all__ = ["BuildProgress", "escape", "make_console", "ninja_step", "plural", "print_error",
           "table"]

_NINJA = re.compile(r"^\s*\[(\d+)/(\d+)\]")
LOG_WIDTH = 10_000   # "no wrapping" for tables: wider than any line cuforge prints


class QuietPipeConsole(Console):
    """A console whose closed pipe (``cuforge matrix | head``) goes up as BrokenPipeError, for
    the CLI to end quietly with the same exit code as for a plain print; rich's own reaction
    is ``SystemExit(1)``."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


class _TrimmedLines:
    """A text stream (stdout or stderr, looked up at each write, as rich does) whose lines lose
    their trailing blanks: a table at its natural width pads every row to its widest one
    (doctor's rows were 1,500 columns of mostly spaces in a log)."""

    def __init__(self, stderr: bool) -> None:
        self.stderr = stderr
        self._partial = ""

    @property
    def stream(self):
        return sys.stderr if self.stderr else sys.stdout

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        if lines:
            self.stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self.stream.write(self._partial)
            self._partial = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()


# set by ``cuforge -q``: the consoles made after it for stderr (progress, heartbeats, notes)
# print nothing; errors (the CLI's own console) and what a command prints on stdout stay
QUIET = "CUFORGE_QUIET"


def make_console(*, stderr: bool = False) -> Console:
    """cuforge's console for stdout (or stderr): wraps on a terminal, or at ``COLUMNS`` when
    that is set (someone asked for that width), nowhere else, and there without the blanks
    that pad table rows."""
    if stderr and os.environ.get(QUIET):   # -q: progress and notes say nothing
        return QuietPipeConsole(stderr=True, quiet=True)
    if Console(stderr=stderr).is_terminal or os.environ.get("COLUMNS", "").strip():
        return QuietPipeConsole(stderr=stderr, highlight=False)
    return QuietPipeConsole(file=_TrimmedLines(stderr), highlight=False, soft_wrap=True,
                            width=LOG_WIDTH)


def plural(n: int, word: str, many: str = "") -> str:
    """``"1 wheel"``, ``"2 wheels"`` (``many``: an irregular plural).

    >>> plural(1, "wheel"), plural(3, "kernel group"), plural(0, "entry", "entries")
    ('1 wheel', '3 kernel groups', '0 entries')
    """
    return f"{n} {word if n == 1 else many or word + 's'}"


def print_error(console: Console, label: str, message: str) -> None:
    """``cuforge: <label>: <message>`` with the message verbatim (brackets kept, never
    re-wrapped mid-word: long paths stay copyable)."""
    line = Text("cuforge: ", style="bold red")
    line.append(f"{label}:", style="bold red")
    line.append(f" {message}")
    console.print(line, soft_wrap=True)


def table(*columns: str, title: str = "", wide: Iterable[str] = ()) -> Table:
    """A table meant for 80 columns: compact box, cells wrap (long words fold) instead of being
    cut with an ellipsis. ``wide`` columns take the spare width first."""
    t = Table(title=title or None, box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    wide = set(wide)
    for name in columns:
        t.add_column(name, overflow="fold", ratio=2 if name in wide else None)
    return t


# -- progress -----------------------------------------------------------------------------------
def ninja_step(line: str) -> tuple[int, int] | None:
    """``"[12/775] /usr/bin/nvcc ..."`` -> ``(12, 775)``; other lines -> None.

    >>> ninja_step("[3/10] Building CUDA object")
    (3, 10)
    >>> ninja_step("warning: [3/10] not at the start") is None
    True
    """
    m = _NINJA.match(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


class StepsColumn(ProgressColumn):
    """ninja's ``[n/N]`` and the time left, once ninja has said how many steps there are;
    before that (a setuptools build between two ninja lines, a CMake configure), how long the
    last build of the package took here, instead of rich's ``0/? eta -:--:--``."""

    def render(self, task: Task) -> Text:
        if task.total:
            left = task.time_remaining
            return Text(f"ninja [{task.completed:.0f}/{task.total:.0f}]"
                        + (f" eta {duration(left)}" if left is not None else ""))
        last = task.fields.get("last")
        return Text(f"last build here {duration(last)}" if last else "")


def live_progress(console: Console) -> Progress:
    """The live display build progress lines go to (one per running package)."""
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24),
                    TimeElapsedColumn(), StepsColumn(), console=console, transient=True)


# How often a long step says it is still running where no live display shows (a pipe, a CI
# log): rich's spinners and bars print nothing there, and a minute of silence reads as a hang.
HEARTBEAT_S = float(os.environ.get("CUFORGE_HEARTBEAT_S") or 15)


@contextmanager
def heartbeat(console: Console, running: Callable[[], list[str]],
              every: float | None = None, *, terminal: bool = False) -> Iterator[None]:
    """While the block runs on a console that is not a terminal, print ``... still running:``
    with what ``running()`` names, every ``every`` seconds (nothing on a terminal: the live
    display is there; ``terminal``: there too, for a step that has no live display)."""
    if (console.is_terminal and not terminal) or console.quiet:
        yield
        return
    every = HEARTBEAT_S if every is None else every
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every):
            for what in running():
                try:
                    console.print(Text(f"... still running: {what}"), soft_wrap=True)
                except BrokenPipeError:   # the reader went away: the main thread says so
                    return

    thread = threading.Thread(target=beat, name="cuforge-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@contextmanager
def timed(what: Callable[[], str], *, start: str = "", done: str = "",
          terminal: bool = False, spinner: str = "") -> Iterator[None]:
    """One slow phase with no live display of its own, on stderr: ``start`` (when given), a
    heartbeat naming ``what()`` and the time so far, and ``done`` with the time it took.
    ``spinner`` (markup): shown with a spinner on a terminal, where no heartbeat prints."""
    out, started = make_console(stderr=True), time.monotonic()
    if start:
        out.print(Text(start), soft_wrap=True)
    with (out.status(spinner) if spinner and not out.quiet else nullcontext()), \
            heartbeat(out, lambda: [f"{what()} ({duration(time.monotonic() - started)})"],
                      terminal=terminal):
        yield
    if done:
        out.print(Text(f"{done} in {duration(time.monotonic() - started)}"), soft_wrap=True)


def progress_lines(progress: Progress) -> list[str]:
    """What a live display shows, as plain lines: each unfinished task, its time, ninja's
    ``[n/N]`` (steps of the ninja build it runs) and how long its last build here took."""
    out = []
    for task in progress.tasks:
        if task.finished:
            continue
        said = [duration(task.elapsed or 0)]
        if task.total:
            said.append(f"ninja [{task.completed:.0f}/{task.total:.0f}]")
        if task.fields.get("last"):
            said.append(f"last build here {duration(task.fields['last'])}")
        out.append(Text.from_markup(task.description).plain + f" ({', '.join(said)})")
    return out


def duration(seconds: float) -> str:
    """``"8.9 s"``, ``"1 min 22 s"``, ``"1 h 05 min"``.

    >>> duration(8.94), duration(82.4), duration(3930)
    ('8.9 s', '1 min 22 s', '1 h 05 min')
    """
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass
class BuildProgress:
    """A live line per package: spinner and phase until the compiler prints ninja steps, then
    a bar with ``n/N``, elapsed time and an estimate of what is left.

    Use as a context manager; hand ``on_line`` to the runner (``runner.listen``) and call
    ``say`` for phase changes ("trying the prebuilt wheel", "verifying"). ``last``: seconds
    the last build of the package took here (the wheelhouse's manifest), shown until ninja
    gives a count, and said in the line that starts the build."""

    package: str
    console: Console
    what: str = "building"
    shared: Progress | None = None   # packages side by side: one live display, a line each
    last: float | None = None
    _progress: Progress | None = field(default=None, init=False)
    _task: TaskID | None = field(default=None, init=False)
    steps: tuple[int, int] | None = field(default=None, init=False)
    started: float = field(default_factory=time.monotonic, init=False)

    def __enter__(self) -> BuildProgress:
        if self.shared is not None:
            self._progress = self.shared
        else:
            self._progress = live_progress(self.console)
            self._progress.__enter__()
        # total=None: an indeterminate (pulsing) bar until ninja says how many steps there are
        self._task = self._progress.add_task(self._label(self.what), total=None, last=self.last)
        return self

    def announce(self) -> None:
        """The line that starts a package's build (a pipe shows no live line): what it does
        and how long its last build here took."""
        last = (f"; its last build here took {duration(self.last)}" if self.last
                else "; no earlier build of it here")
        self.console.print(Text(f"{self.package}: {self.what}{last}"), soft_wrap=True)

    def __exit__(self, *exc) -> None:
        assert self._progress is not None
        if self.shared is not None:
            assert self._task is not None
            self._progress.remove_task(self._task)
        else:
            self._progress.__exit__(*exc)

    def _label(self, text: str) -> str:
        return escape(f"{self.package}: {text}")

    def say(self, text: str) -> None:
        assert self._progress is not None and self._task is not None
        self._progress.update(self._task, description=self._label(text))

    def on_line(self, line: str) -> None:
        """Feed one line of compiler output; ninja's ``[n/N]`` moves the bar."""
        step = ninja_step(line)
        if step is None or self._progress is None or self._task is None:
            return
        done, total = step
        self.steps = step   # a later ninja run (another extension) simply sets a new total
        self._progress.update(self._task, completed=done, total=total)
