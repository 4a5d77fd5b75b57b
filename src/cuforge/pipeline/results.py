"""A build's last word: one table of what happened to each package (its result, the time it
took, the arches its wheel embeds, the C library it needs, where the wheel is, why it failed),
on stdout: the result
of ``cuforge build``, which ``-q`` keeps (progress and notes go to stderr, and ``-q`` drops
them)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.table import Table
from rich.text import Text

from cuforge.core.console import duration, table
from cuforge.publish.wheelhouse import Entry, Status

_STYLE = {"compiled": "green", "prebuilt": "green", "up to date": "green", "skipped": "yellow",
          "FAILED": "bold red", "not started": "yellow"}


def result_of(entry: Entry | None, current: bool) -> str:
    """``compiled``, ``prebuilt``, ``up to date``, ``skipped``, ``FAILED`` or ``not started``."""
    if entry is None:
        return "not started"
    return "up to date" if current else str(entry.status)


def arches(entry: Entry) -> str:
    """``"sass 120 121; ptx 121"`` as the wheel embeds them; ``-`` without a wheel.

    >>> arches(Entry("a", "compiled", arches_embedded={"sass": ["90"], "ptx": []}))
    'sass 90; ptx -'
    """
    if not entry.status.has_wheel:
        return "-"
    emb = entry.arches_embedded
    return (f"sass {' '.join(emb.get('sass', [])) or '-'}; "
            f"ptx {' '.join(emb.get('ptx', [])) or '-'}")


def floor(entry: Entry) -> str:
    """The C library the wheel needs (``glibc >= 2.34, GLIBCXX_3.4.30``); ``-`` without a
    wheel or for a pure-Python one (and for lines published before issue 63).

    >>> floor(Entry("a", "compiled", floor={"text": "glibc >= 2.34"}))
    'glibc >= 2.34'
    """
    return entry.floor.get("text", "-") if entry.status.has_wheel and entry.floor else "-"


def _where(path: Path) -> str:
    """The wheel's path, relative to the current directory when below it (shorter to copy)."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else str(path)


def why(entry: Entry | None, stopped: bool) -> str:
    if entry is None:
        return "the build stopped at a failure first" if stopped else ""
    if entry.status in (Status.FAILED, Status.SKIPPED):
        return entry.reason.splitlines()[0] if entry.reason else ""
    return ""


def results_table(title: str, packages: Sequence[str], results: Mapping[str, Entry],
                  current: set[str], wheel_dir: Path) -> Table:
    """One row per planned package, in the plan's order (``current``: found up to date)."""
    stopped = any(e.status is Status.FAILED for e in results.values())
    t = table("package", "result", "time", "arches", "needs", "wheel", "why it failed",
              title=title, wide=["wheel", "why it failed"])
    for name in packages:
        entry = results.get(name)
        result = result_of(entry, name in current)
        seconds = entry.build_seconds if entry and name not in current else 0
        wheel = wheel_dir / entry.wheel if entry and entry.wheel else None
        t.add_row(Text(name), Text(result, style=_STYLE[result]),
                  Text(duration(seconds) if seconds else "-"),
                  Text(arches(entry) if entry else "-"), Text(floor(entry) if entry else "-"),
                  Text(_where(wheel) if wheel else "-"), Text(why(entry, stopped)))
    return t
