"""Can the wheelhouse be written? Asked before any work (``pipeline.executor.check_build``,
``cuforge index``), so a read-only or full wheelhouse is one line and exit 9 up front, not a
traceback or a refusal after minutes of compiling. Nothing is written to find out: the
nearest existing directory is asked (``access``, ``statvfs``), so a dry run leaves no trace.

>>> elsewhere("--wheelhouse")
'pass --wheelhouse DIR on a disk you may write to'
>>> elsewhere("")
'pass --wheelhouse DIR (or set CUFORGE_WHEELHOUSE) to write elsewhere'
"""

from __future__ import annotations

import os
from pathlib import Path

from cuforge.config.combos import Combo
from cuforge.core.errors import WheelhouseError
from cuforge.core.project import Project

ARGUMENT = "the path given"   # a command's own DIR argument (cuforge index DIR)
MIN_FREE = 1 << 20   # below 1 MiB free the disk is full: no manifest line, no wheel fits


def elsewhere(named_by: str) -> str:
    """How to move the wheelhouse, in the words of the option the user set (``--wheelhouse``,
    ``CUFORGE_WHEELHOUSE``, or "" for the default ``wheelhouse/``)."""
    if named_by == "--wheelhouse":
        return "pass --wheelhouse DIR on a disk you may write to"
    if named_by == "CUFORGE_WHEELHOUSE":
        return "point CUFORGE_WHEELHOUSE at a directory you may write to"
    if named_by == ARGUMENT:   # cuforge index DIR: its index is written into DIR
        return "copy the wheelhouse to a disk you may write to and index the copy"
    return "pass --wheelhouse DIR (or set CUFORGE_WHEELHOUSE) to write elsewhere"


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent: where a mkdir of ``path`` would start."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _why_not(path: Path) -> tuple[str, bool] | None:
    """Why nothing can be written under ``path`` (and whether freeing space would help), or
    None when it can."""
    at = _existing(path)
    it = "it" if at == path.absolute() else str(at)   # the first existing part of the path
    if not at.is_dir():
        return f"{it} is not a directory", False
    stat = os.statvfs(at)
    if stat.f_flag & os.ST_RDONLY:
        return f"{it} is on a read-only file system", False
    if not os.access(at, os.W_OK | os.X_OK):
        return f"{it} is not writable by this user", False
    free = stat.f_bavail * stat.f_frsize
    if free < MIN_FREE:
        return f"no space left on its disk ({free // 1024} KiB free)", True
    return None


def where(path: Path, named_by: str) -> str:
    """``the wheelhouse DIR (--wheelhouse)``: the path and who chose it."""
    return f"the wheelhouse {path}" + (f" ({named_by})" if named_by else "")


def check_writable(path: Path, named_by: str) -> None:
    """Raise WheelhouseError (exit 9) when ``path`` (a wheelhouse root or one of its
    directories) cannot be written: read-only, not ours, or a full disk."""
    found = _why_not(path)
    if found is not None:
        why, full = found
        raise WheelhouseError(f"cannot write to {where(path, named_by)}: {why}; nothing was "
                              "written", hint=("free disk space there, or " if full else "")
                              + elsewhere(named_by))


def check_wheelhouse(project: Project, combo: Combo) -> None:
    """The combo's wheelhouse directory can be written (read-only, not ours or a full disk:
    exit 9 now, naming the option that chose it, not after the compile)."""
    check_writable(combo.wheel_dir(project.wheelhouse), project.wheelhouse_named_by)
