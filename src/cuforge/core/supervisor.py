"""The process every command runs under: it ends the command's whole tree when cuforge dies.

Usage (by ``runner`` only): ``python -I supervisor.py COMMAND...`` with a *lifeline* pipe as
stdin. cuforge holds the pipe's only write end. The kernel closes it however cuforge ends
(exit, Ctrl-C, SIGTERM, SIGHUP, a SIGKILL of cuforge alone by the OOM killer), so end of file
on stdin means "cuforge is gone": the supervisor then ends every descendant - SIGTERM, 2 s,
SIGKILL - and exits. When the command ends by itself, the supervisor exits with its status.

Why not ``PR_SET_PDEATHSIG`` on the command: it reaches only the direct child (pip), not
ninja and nvcc below it, and it fires when the *thread* that forked dies, and cuforge forks
from a thread pool. Why not only a process group: a build may leave its group (ccimport,
sccache's server), and a kill of cuforge's own group misses groups of their own. So the
supervisor is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): whatever leaves the tree by
double-forking or ``setsid`` is re-parented to it, not to init, and stays in reach. The
supervisor itself runs in a session of its own, so a terminal's SIGHUP/SIGINT or a kill of
cuforge's process group does not take it down before it has cleaned up.

Stdlib only, started with ``-I``: it must not import cuforge (or the build's shim) to be
quick and to work whatever ``PYTHONPATH`` the command gets.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 2.0      # SIGTERM, then SIGKILL: the whole tree is gone well within 5 s
STOPPED = 143      # our exit status when the lifeline closed (128 + SIGTERM)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: supervisor.py COMMAND...", file=sys.stderr)
        return 2
    _subreaper()
    _keep_fds_from_the_command()
    lifeline = sys.stdin.fileno()
    os.set_blocking(lifeline, False)
    try:
        child = _spawn(argv)
    except FileNotFoundError:
        print(f"cuforge: command not found: {argv[0]}", file=sys.stderr, flush=True)
        return 127
    stop = _stop_on_signals()
    pidfd = os.pidfd_open(child)
    while True:
        ready, _, _ = select.select([lifeline, pidfd, stop], [], [])
        if pidfd in ready:
            _, status = os.waitpid(child, 0)
            end_tree(os.getpid())   # a step leaves nothing running (a daemon it started)
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code   # killed by signal N: 128 + N
        if stop in ready or (lifeline in ready and _closed(lifeline)):
            end_tree(os.getpid())
            return STOPPED


def _subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:   # Linux >= 3.4
        print("cuforge: warning: PR_SET_CHILD_SUBREAPER failed; processes that leave the "
              "command's group may outlive cuforge", file=sys.stderr, flush=True)


def _keep_fds_from_the_command() -> None:
    """Descriptors cuforge passed on (the work dir's lock, so it stays held until the tree is
    gone) stay with the supervisor: the command does not inherit them."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass   # the descriptor listdir itself used


def _spawn(argv: list[str]) -> int:
    """The command, in a process group of its own, stdin from /dev/null (not the lifeline)."""
    null = os.open(os.devnull, os.O_RDONLY)
    pid = os.posix_spawnp(argv[0], argv, os.environ, setpgroup=0,
                          file_actions=[(os.POSIX_SPAWN_DUP2, null, 0)])
    os.close(null)
    return pid


def _stop_on_signals() -> int:
    """A pipe that becomes readable when someone sends the supervisor SIGTERM/SIGINT/SIGHUP."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    return read


def _closed(fd: int) -> bool:
    try:
        return os.read(fd, 4096) == b""
    except BlockingIOError:
        return False


def end_tree(root: int) -> None:
    """SIGTERM every descendant of ``root``, SIGKILL what is left after ``GRACE_S``, and reap
    them all (orphans are re-parented to ``root``, the subreaper)."""
    deadline = time.monotonic() + GRACE_S
    sig = signal.SIGTERM
    while True:
        pids = descendants(root)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        _reap()
        if time.monotonic() >= deadline:
            sig = signal.SIGKILL
        time.sleep(0.05)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def descendants(root: int) -> list[int]:
    """Live process ids below ``root``, parents before children (read from /proc; zombies,
    already dead, are left out)."""
    children: dict[int, list[int]] = {}
    state: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # the command name may hold spaces: the state and parent pid follow the last ")"
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue   # exited while we looked
        pid = int(stat.parent.name)
        state[pid] = fields[0]
        children.setdefault(int(fields[1]), []).append(pid)
    out: list[int] = []
    todo = [root]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return [p for p in out if state.get(p) != "Z"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
