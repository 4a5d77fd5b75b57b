"""The emulation root entered as the target machine: the DGX Spark's own path, rehearsed here.

``cuforge emulation run -- CMD`` runs ``CMD`` with the emulation root (``envs/emulation.toml``:
the root's packages plus its ``native_toolchain``) as ``/``: a chroot in a private mount
namespace, as ``docker run --platform linux/arm64`` enters an arm64 image. Every program in
there is the target's, run by QEMU through binfmt_misc: Python, pip, uv, cuforge itself, the
sbsa toolkit wheels' nvcc, Debian's arm64 g++, ``/bin/sh``. No host program can run in it,
because none is in it: the host shows through only as data (the project, uv's cache, local
package indexes, ``/tmp``, ``/dev``, ``/proc``, ``/sys``, DNS and CA files), each at its own
path. ``cuforge build`` in there sees a linux-aarch64 machine and takes no emulation decision.

Plain emulated builds (``emulate = true``, cuforge.env.emulation) never come here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cuforge.env.emulation import TOOLCHAIN_MARKER, Emulator
from cuforge.env.emulation_setup import registered_emulators
from cuforge.core.errors import ToolchainError

# Host data the target sees at the same path (when present); never a program it runs.
DATA_PATHS = ("/tmp", "/etc/resolv.conf", "/etc/hosts", "/etc/ssl/certs")
# Variables that pass into the root: cuforge's, the package indexes' and how to reach them
# (proxies, a CA bundle), the terminal's.
PASSED = re.compile(r"^(CUFORGE_|UV_|PIP_)|^(SSL_CERT_FILE|SSL_CERT_DIR|REQUESTS_CA_BUNDLE|"
                    r"(?i:https?_proxy|no_proxy|all_proxy)|COLUMNS|TERM|NO_COLOR)$")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class RootEntry:
    """What entering the root does: the mounts, then ``argv`` in ``cwd`` with ``env``."""

    root: str
    binds: tuple[str, ...]      # host paths shown at the same path inside
    cwd: str
    argv: tuple[str, ...]
    env: dict[str, str]


def unusable(state_dir: Path, emu: Emulator) -> str:
    """Why the root cannot be entered as the target here ('' when it can)."""
    root = emu.root_dir(state_dir)
    if emu.toolchain is None:
        return f"envs/emulation.toml [{emu.platform}] has no native_toolchain"
    if not registered_emulators(emu):
        return f"no binfmt_misc registration runs {emu.platform} programs"
    if not (root / TOOLCHAIN_MARKER).is_file():
        return f"the {emu.platform} root at {root} has no native toolchain yet"
    missing = [t for t in ("unshare", "mount", "chroot") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not found (util-linux, coreutils)"
    if os.geteuid() != 0:
        return "entering the root (mount namespace, chroot) needs root"
    return ""


def local_indexes(environ: Mapping[str, str]) -> list[str]:
    """The local package indexes and wheel folders pip's and uv's variables name. A static
    simple index links its files relative to itself, often one level up (this machine's
    mirror: ``/opt/pypi/simple`` beside ``/opt/pypi/files``), so its parent is taken."""
    found = []
    for name, value in environ.items():
        if name.startswith(("UV_", "PIP_")):
            for word in re.split(r"[\s,]+", value):
                local = Path(word.removeprefix("file://"))
                if local.is_absolute() and local.exists():
                    found.append(str(local.parent if local.name == "simple" else local))
    return found


def data_binds(project_root: Path, state_dir: Path) -> list[str]:
    """The host paths the target sees: the project, its state, where their links lead (a
    bench's project and state link the checkout's), the checkout this cuforge runs from (an
    editable install inside imports it), uv's cache, the local package indexes the
    environment names (``file://`` URLs and directories) and DATA_PATHS."""
    linked = [p.resolve() for base in (project_root, state_dir)
              for p in (base, *base.glob("*"), *base.glob("*/*")) if p.is_symlink()]
    checkout = Path(__file__).resolve().parents[3]   # <checkout>/src/cuforge/env/rootrun.py
    paths = [str(p) for p in (project_root.resolve(), state_dir.resolve(), *linked)]
    if (checkout / "pyproject.toml").is_file():
        paths.append(str(checkout))
    paths += DATA_PATHS
    cache = os.environ.get("UV_CACHE_DIR") or _uv_cache_dir()
    if cache:
        paths.append(cache)
    paths += local_indexes(os.environ)
    out: list[str] = []
    for p in sorted(set(paths)):
        if Path(p).exists() and not any(p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def entry(state_dir: Path, emu: Emulator, project_root: Path, argv: list[str],
          cwd: Path | None = None) -> RootEntry:
    cache = os.environ.get("UV_CACHE_DIR") or _uv_cache_dir()
    env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8",
           **{k: v for k, v in os.environ.items() if PASSED.match(k)}}
    if cache:
        env["UV_CACHE_DIR"] = cache
    return RootEntry(str(emu.root_dir(state_dir).resolve()),
                 tuple(data_binds(project_root, state_dir)),
                 str((cwd or Path.cwd()).resolve()), tuple(argv), env)



def command(e: RootEntry) -> list[str]:
    """The host command that enters: ``unshare`` makes the mounts private to it (they vanish
    with it), then this module's ``__main__`` mounts and ``chroot``s (``os.chroot``)."""
    return ["unshare", "--mount", "--propagation", "private", "--fork", "--",
            sys.executable, "-m", "cuforge.env.rootrun", json.dumps(e.__dict__)]


def run(state_dir: Path, emu: Emulator, project_root: Path, argv: list[str]) -> int:
    """``cuforge emulation run``: ``argv`` inside the root; its exit status."""
    if why := unusable(state_dir, emu):
        raise ToolchainError(f"cannot enter the {emu.platform} root: {why}",
                             hint="run `sudo cuforge emulation setup` (it unpacks the "
                                  "native_toolchain of envs/emulation.toml), then `sudo cuforge "
                                  "emulation run -- ...`")
    return subprocess.run(command(entry(state_dir, emu, project_root, argv))).returncode


def _uv_cache_dir() -> str:
    try:
        from cuforge.env.venv import find_uv
        out = subprocess.run([find_uv(), "cache", "dir"], capture_output=True, text=True)
    except (ToolchainError, OSError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"cuforge emulation run: mount {' '.join(args)}: {proc.stderr.strip()}")


def _enter(e: RootEntry) -> None:
    """In the private mount namespace: show this machine's data inside, then become the
    target."""
    root = Path(e.root)
    for fs, where in (("proc", "proc"), ("sysfs", "sys")):
        (root / where).mkdir(exist_ok=True)
        _mount("-t", fs, fs, str(root / where))
    (root / "dev").mkdir(exist_ok=True)
    _mount("--rbind", "/dev", str(root / "dev"))
    for outside in e.binds:
        inside = root / outside.lstrip("/")
        if Path(outside).is_dir():
            inside.mkdir(parents=True, exist_ok=True)
        else:
            inside.parent.mkdir(parents=True, exist_ok=True)
            inside.touch()
        _mount("--bind", outside, str(inside))
    os.chroot(root)
    os.chdir(e.cwd)
    os.execvpe(e.argv[0], list(e.argv), {**e.env})


if __name__ == "__main__":
    _enter(RootEntry(**{**json.loads(sys.argv[1])}))
