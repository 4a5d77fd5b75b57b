"""Every program the kernel ran for a command, and the machine each one's code is for.

``traced(argv)`` runs ``argv`` under ``strace -f -e trace=execve`` (seccomp-filtered, so only
the execs stop the tracees). Each successful execve names a file: an ELF executable, or a
script whose ``#!`` interpreter the kernel ran in its place. ``machines()`` reads each one's
ELF header (``e_machine``) through ``rootrun.host_path``, as the chroot sees the file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile

from cuforge.env.rootrun import RootEntry
from root_paths import host_path

_EXEC = re.compile(r'^(\d+) +execve\("((?:[^"\\]|\\.)*)", \[(.*)')
_DONE = re.compile(r"= (-?\d+)(?: [A-Z]+ .*)?$")
_RESUMED = re.compile(r"^(\d+) +<\.\.\. execve resumed>")


@dataclass(frozen=True)
class Ran:
    path: str            # as the process named it
    argv0: str
    machine: str         # EM_AARCH64, EM_X86_64, ... of the code that ran ('' unknown)
    via: str = ""        # the script whose interpreter this is


def strace_argv(log: Path) -> list[str]:
    strace = shutil.which("strace")
    if strace is None:
        raise FileNotFoundError("strace")
    return [strace, "-f", "--seccomp-bpf", "-qq", "-e", "trace=execve", "-e", "signal=none",
            "-s", "400", "-o", str(log)]


def execs(log: Path) -> list[tuple[int, str, str]]:
    """(pid, path, the argument list's text) of each successful execve, in the order they
    happened (an exec another process interrupted is completed by its ``resumed`` line)."""
    out, pending = [], {}
    for line in log.read_text(errors="replace").splitlines():
        done = _DONE.search(line)
        if m := _EXEC.match(line):
            pid = int(m[1])
            if "<unfinished ...>" in line:
                pending[pid] = (m[2], m[3])
            elif done and done[1] == "0":
                out.append((pid, m[2], m[3]))
        elif (m := _RESUMED.match(line)) and int(m[1]) in pending:
            path, args = pending.pop(int(m[1]))
            if done and done[1] == "0":
                out.append((int(m[1]), path, args))
    return out


def argv(args: str) -> list[str]:
    """The strings of strace's argument list (as far as strace printed them)."""
    return re.findall(r'"((?:[^"\\]|\\.)*)"', args.split("], 0x", 1)[0])


def after_entering(found: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    """The execs inside the root: from the one in which the process that ran
    ``python -m cuforge.env.rootrun`` (host Python, doing the mounts) became the command."""
    for i, (pid, _, args) in enumerate(found):
        if argv(args)[1:3] == ["-m", "cuforge.env.rootrun"]:
            later = [j for j in range(i + 1, len(found)) if found[j][0] == pid]
            return found[later[0]:] if later else []
    return []


def machine_of(file: Path) -> str:
    try:
        with open(file, "rb") as fh:
            head = fh.read(4)
            fh.seek(0)
            return ELFFile(fh).header["e_machine"] if head == b"\x7fELF" else ""
    except (OSError, Exception):   # not readable, or not an ELF file pyelftools accepts
        return ""


def machines(entry: RootEntry, found: list[tuple[int, str, str]]) -> list[Ran]:
    """What each exec ran: the ELF file, or for a script the interpreter chain's ELF file."""
    out = []
    for _, path, args in found:
        argv0 = (argv(args) or [path])[0]
        file, via = host_path(entry, path), ""
        for _ in range(4):                       # #! chains are short
            head = file.read_bytes()[:256] if file.is_file() else b""
            if not head.startswith(b"#!"):
                break
            via = via or path
            interp = head[2:].split(b"\n")[0].split()[0].decode()
            file = host_path(entry, interp)
        out.append(Ran(path, argv0, machine_of(file), via))
    return out


def traced(argv: list[str], log: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*strace_argv(log), *argv], **kwargs)
