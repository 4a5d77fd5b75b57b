"""One interpreter per wheelhouse for the checks: a *check host* imports torch once and forks a
child per check (an import, the GPU probe, a smoke script), instead of a fresh interpreter
that loads torch again for each one: on the H200 a team wheel's checks took 10-13 s, most of
it interpreters starting and importing torch (issue 44).

Each check still runs in a process of its own: the child is forked from the host, so a
segfault or a hang ends that child only, and its verdict names its wheel as before. The host
never touches CUDA (``import torch`` does not initialise it), so every child can.

Used through ``serving(python, ...)``: while the block runs, ``_proc.run_python`` sends the
``python -c CODE ARGS`` runs of that interpreter to its hosts (one with torch imported, one
plain for the import without torch and without ``LD_LIBRARY_PATH``); anything else, and
everything when a host cannot start, runs as a fresh interpreter as before.

The host talks JSON lines over a Unix socket (the supervisor owns its stdin as a lifeline).
It is single-threaded: it forks only from its main thread, so no lock is copied held.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

from cuforge.core.runner import holding_nothing, supervised

_CONNECT_S = 120.0      # a host imports torch before it answers: seconds on a loaded machine

# The host's program (stdlib only). A request: {"id", "code", "argv", "paths", "env", "out",
# "err", "timeout"}; the answer: {"id", "status"} (waitpid's status) or {"id", "timed_out"}.
SERVER = r'''
import json, os, select, signal, socket, sys, time
conn = socket.socket(socket.AF_UNIX)
conn.connect(sys.argv[1])
if sys.argv[2] == "torch":
    try:
        import torch  # noqa: F401  (loads its libraries once; CUDA stays untouched)
    except BaseException:
        pass          # each child then fails to import it, and says why
conn.sendall(b'{"ready": true}\n')

def child(req):
    os.setpgid(0, 0)
    fd = os.open(req["out"], os.O_WRONLY | os.O_TRUNC); os.dup2(fd, 1); os.close(fd)
    fd = os.open(req["err"], os.O_WRONLY | os.O_TRUNC); os.dup2(fd, 2); os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    import faulthandler; faulthandler.enable()
    os.environ.clear(); os.environ.update(req["env"])
    os.chdir(req["cwd"])
    sys.path[:0] = req["paths"]
    sys.argv = ["-c", *req["argv"]]
    code = 0
    try:
        exec(compile(req["code"], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
        if not isinstance(end.code, (int, type(None))):
            print(end.code, file=sys.stderr)
    except BaseException:
        import traceback; traceback.print_exc(); code = 1
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(code)

running = {}   # pid -> (request id, deadline)
buf = b""
while True:
    now = time.monotonic()
    wait = min([d for _, d in running.values()], default=now + 60) - now
    ready, _, _ = select.select([conn], [], [], max(0.0, min(wait, 0.2 if running else 60)))
    if ready:
        data = conn.recv(65536)
        if not data:
            break
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            pid = os.fork()
            if pid == 0:
                child(req)
            running[pid] = (req["id"], time.monotonic() + req["timeout"])
    for pid, (rid, deadline) in list(running.items()):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            del running[pid]
            conn.sendall(json.dumps({"id": rid, "status": status}).encode() + b"\n")
        elif time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            del running[pid]
            conn.sendall(json.dumps({"id": rid, "timed_out": True}).encode() + b"\n")
for pid in running:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
'''


class HostGone(Exception):
    """The host ended (or never started): the caller runs the check as a fresh interpreter."""


class CheckHost:
    """One host interpreter; ``run`` is safe from many threads (the pipeline verifies
    packages side by side)."""

    def __init__(self, python: Path, env: Mapping[str, str], *, torch: bool) -> None:
        self.python, self.torch = Path(python), torch
        self._dir = tempfile.TemporaryDirectory(prefix="cuforge-host-")
        sock_path = os.path.join(self._dir.name, "s")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(sock_path)
        listener.listen(1)
        listener.settimeout(_CONNECT_S)
        self._proc_cm = supervised([str(python), "-c", SERVER, sock_path,
                                    "torch" if torch else "plain"], env=dict(env))
        with holding_nothing():
            self._proc = self._proc_cm.__enter__()
        try:
            self._conn, _ = listener.accept()
            self._reader = self._conn.makefile("rb")
            if b"ready" not in self._reader.readline():
                raise OSError("the check host did not start")
        except OSError as err:
            self.close()
            raise HostGone(str(err)) from None
        finally:
            listener.close()
        self._lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._next = 0
        self._alive = True
        threading.Thread(target=self._read_answers, daemon=True).start()

    def _read_answers(self) -> None:
        for line in self._reader:
            answer = json.loads(line)
            with self._lock:
                future = self._pending.pop(answer["id"], None)
            if future is not None:
                future.set_result(answer)
        with self._lock:
            self._alive = False
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(HostGone("the check host ended"))

    def run(self, code: str, argv: Sequence[str], *, paths: Sequence[Path], env: Mapping[str, str],
            timeout: float) -> tuple[int | None, str, str]:
        """``python -c code argv...`` as a child of the host: (returncode, stdout, stderr);
        returncode None on timeout, -N when killed by signal N."""
        with tempfile.TemporaryDirectory(prefix="cuforge-run-") as scratch:
            out, err = Path(scratch, ".out"), Path(scratch, ".err")
            out.touch()
            err.touch()
            future: Future = Future()
            with self._lock:
                if not self._alive:
                    raise HostGone("the check host ended")
                self._next += 1
                rid = self._next
                self._pending[rid] = future
                request = {"id": rid, "code": code, "argv": list(argv),
                           "paths": [str(p) for p in paths], "env": dict(env), "cwd": scratch,
                           "out": str(out), "err": str(err), "timeout": timeout}
                try:
                    self._conn.sendall(json.dumps(request).encode() + b"\n")
                except OSError as error:
                    self._pending.pop(rid, None)
                    raise HostGone(str(error)) from None
            answer = future.result(timeout=timeout + 30)
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        if answer.get("timed_out"):
            return None, stdout, stderr
        return os.waitstatus_to_exitcode(answer["status"]), stdout, stderr

    def close(self) -> None:
        for end in (getattr(self, "_conn", None),):
            if end is not None:
                end.close()
        self._proc_cm.__exit__(None, None, None)
        try:
            self._proc.wait(timeout=10)
        except Exception:   # noqa: BLE001 - the supervisor ends it with its lifeline cut
            pass
        self._dir.cleanup()


class _Pool:
    """The hosts of one ``serving`` block, started on first use, by (torch?, env)."""

    def __init__(self, python: Path, base_env: Mapping[str, str]) -> None:
        self.python = Path(python)
        self.base_env = dict(base_env)
        self._hosts: dict[tuple, CheckHost | None] = {}
        self._lock = threading.Lock()
        self._closed = False

    def check_host(self, *, torch: bool, env: Mapping[str, str]) -> CheckHost | None:
        key = (torch, tuple(sorted(env.items())))
        with self._lock:
            if self._closed:   # the block is ending (an interrupt): fresh interpreters
                return None
            if key not in self._hosts:
                try:
                    self._hosts[key] = CheckHost(self.python, env, torch=torch)
                except HostGone:
                    self._hosts[key] = None     # fresh interpreters, as before
            return self._hosts[key]

    def close(self) -> None:
        # a package's thread may still ask for a host while an interrupt closes the pool
        with self._lock:
            self._closed = True
            hosts = list(self._hosts.values())
        for check_host in hosts:
            if check_host is not None:
                check_host.close()


_ACTIVE: dict[Path, _Pool] = {}


@contextmanager
def serving(python: Path, env: Mapping[str, str] | None = None, *,
            enabled: bool = True) -> Iterator[None]:
    """Within the block, ``python``'s checks run in its hosts (``enabled=False``: as fresh
    interpreters, e.g. under emulation, where a QEMU process forks as slowly as it starts)."""
    if not enabled or Path(python) in _ACTIVE:
        yield
        return
    pool = _Pool(Path(python), env or {})
    _ACTIVE[Path(python)] = pool
    try:
        yield
    finally:
        _ACTIVE.pop(Path(python), None)
        pool.close()


def pool_for(python: Path) -> _Pool | None:
    return _ACTIVE.get(Path(python))
