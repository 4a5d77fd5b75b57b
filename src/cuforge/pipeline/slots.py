"""Compile slots: one budget of compiler processes for a whole build, shared by every package.

Splitting ``--jobs`` into fixed shares wastes cores: a package with three files holds its share
of four jobs while another package with twenty files waits for its own (the MILo set on the
H200 built side by side in 0.54x of its serial time, not the 0.4x asked). So when packages build
side by side, each one's build tool may start up to the whole budget of compilers, and every
compiler first takes a slot from a pool of ``--jobs`` slots: GNU make's jobserver idea, a FIFO
holding one byte per free slot. A compiler blocks in ``read`` until a slot is free (no polling)
and gives the byte back when it exits, whatever its exit status.

The slot script sits in front of the compilers as a launcher (``CXX``, ``PYTORCH_NVCC`` and
``CMAKE_<LANG>_COMPILER_LAUNCHER``), before sccache when the cache is on. Outside a cuforge
build (``$CUFORGE_SLOTS`` unset, e.g. a command copied from ``--dry-run``) it only runs the
compiler. Compilers a build runs by their own path (spconv's ccimport) are not counted; such
packages build alone at their depth in practice (pccm -> cumm -> spconv).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cuforge.core.atomic import EXECUTABLE, write_atomic

VARIABLE = "CUFORGE_SLOTS"

SCRIPT = """#!/bin/sh
# cuforge: take one of the build's compile slots, run the compiler, give the slot back
# (src/cuforge/pipeline/slots.py). Without a pool it only runs the compiler.
[ -p "${CUFORGE_SLOTS:-}" ] || exec "$@"
dd if="$CUFORGE_SLOTS" of=/dev/null bs=1 count=1 2>/dev/null
"$@"
status=$?
printf . >>"$CUFORGE_SLOTS"
exit $status
"""


def available() -> bool:
    """The script needs only a POSIX shell and dd, but mkfifo is POSIX-only."""
    return hasattr(os, "mkfifo") and shutil.which("dd") is not None


def launcher_path(state_dir: Path) -> Path | None:
    """Where the plan's commands find ``launcher``'s script (a plan only names it); None where
    the platform cannot run it."""
    return _script(state_dir) if available() else None


def _script(state_dir: Path) -> Path:
    return state_dir / "slots" / "take-slot"


def launcher(state_dir: Path) -> Path:
    """``<state>/slots/take-slot``, written once (atomically: builds may start side by side)."""
    return write_atomic(_script(state_dir), SCRIPT, EXECUTABLE)


@contextmanager
def pool(state_dir: Path, size: int) -> Iterator[Path]:
    """A FIFO with ``size`` free slots, named by ``$CUFORGE_SLOTS`` for every command started in
    the block. This process keeps it open for reading and writing, so a compiler's open never
    blocks and a slot given back is never lost while the build runs. The plan's commands
    take their slots through ``launcher``'s script, written here."""
    launcher(state_dir)
    where = Path(tempfile.mkdtemp(prefix="pool-", dir=state_dir / "slots"))
    fifo = where / "fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)
    os.write(fd, b"." * size)
    before = os.environ.get(VARIABLE)
    os.environ[VARIABLE] = str(fifo)
    try:
        yield fifo
    finally:
        if before is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = before
        os.close(fd)
        shutil.rmtree(where, ignore_errors=True)
