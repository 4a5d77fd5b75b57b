"""Crash points for tests: prove that every phase survives a SIGKILL.

``CUFORGE_FAULT=<point>`` makes cuforge kill its child processes and then itself with SIGKILL
when it reaches ``point`` (see ``POINTS``); ``CUFORGE_FAULT=<point>@<seconds>`` arms a timer
there instead, so the kill lands while a long child (a compiler) is still running. A suffix
``:alone`` SIGKILLs cuforge only, as the OOM killer does: its children are left to the
supervisor (``cuforge.core.supervisor``), which must end them within 5 s. Unset (the
normal case) a point costs one dictionary lookup. tests/integration/test_faults.py uses it; the
outcome per point is the table in docs/reliability.md.
"""

from __future__ import annotations

import os
import signal
import threading

from cuforge.core.supervisor import descendants   # the one walk of /proc, shared with the supervisor

VARIABLE = "CUFORGE_FAULT"
POINTS = ("env", "fetch", "patch", "compile", "verify", "publish", "manifest")


def point(name: str) -> None:
    """Die here (or ``@seconds`` from here) when ``$CUFORGE_FAULT`` names this point."""
    spec = os.environ.get(VARIABLE)
    if not spec:
        return
    spec, _, victim = spec.partition(":")
    wanted, _, delay = spec.partition("@")
    if wanted != name:
        return
    kill = kill_self if victim == "alone" else kill_tree
    if delay:
        timer = threading.Timer(float(delay), kill)
        timer.daemon = True
        timer.start()
    else:
        kill()


def kill_self() -> None:
    """SIGKILL this process only (the OOM killer's way): no handler, no cleanup."""
    os.kill(os.getpid(), signal.SIGKILL)


def kill_tree() -> None:
    """SIGKILL every descendant (supervisors and compilers run in sessions of their own, so a
    process group kill would miss them), then this process: no handler, no cleanup, like a
    power cut."""
    for pid in reversed(descendants(os.getpid())):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)
