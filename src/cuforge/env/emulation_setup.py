"""``cuforge emulation setup`` and ``status``: provisioning another platform's emulation here
(the Debian packages of ``envs/emulation.toml`` fetched by ``apt-get`` with a private state and
unpacked by ``dpkg -x``, the sysroot compiler wrappers, the binfmt_misc registration) and the
health check ``cuforge doctor`` and every emulated command show (``check``). What a build runs
with is ``cuforge.env.emulation``'s."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from cuforge.core.errors import ToolchainError
from cuforge.core.runner import Step, run
from cuforge.env.emulation import TOOLCHAIN_MARKER, DebSet, Emulator, environment

BINFMT = Path("/proc/sys/fs/binfmt_misc")

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

# bookworm's QEMU 7.2 segfaults here (torch._C); a working QEMU prints "2.14.1+cu130 3.0"
TORCH_CHECK = "import torch; print(torch.__version__, torch.zeros(3).add(1).sum().item())"


def apt_options(emu: Emulator, debs: DebSet, state: Path) -> list[str]:
    """apt-get options for a private apt: its own sources, lists, cache and an empty dpkg
    status, so the host's apt configuration and installed packages are left alone."""
    for sub in ("lists/partial", "archives/partial", "preferences.d"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    sources = state / "sources.list"
    sources.write_text(f"deb [signed-by={KEYRING}] {emu.mirror} {debs.suite} main\n")
    (state / "status").touch()
    return ["-o", f"Dir::Etc::SourceList={sources}", "-o", "Dir::Etc::SourceParts=-",
            "-o", f"Dir::Etc::PreferencesParts={state / 'preferences.d'}",
            "-o", f"Dir::State::Lists={state / 'lists'}", "-o", f"Dir::Cache={state}",
            "-o", f"Dir::Cache::archives={state / 'archives'}",
            "-o", f"Dir::State::status={state / 'status'}",
            "-o", f"APT::Architecture={debs.arch}", "-o", f"APT::Architectures={debs.arch}",
            "-o", "APT::Sandbox::User=root"]


def unpack_steps(emu: Emulator, debs: DebSet, state: Path, dest: Path) -> list[Step]:
    """Download ``debs`` with their dependencies (no recommends) and ``dpkg -x`` them."""
    opts = apt_options(emu, debs, state)
    return [
        Step(("apt-get", *opts, "-q", "update"), description=f"apt lists of {debs.suite} "
             f"{debs.arch}"),
        Step(("apt-get", *opts, "-q", "-y", "--no-install-recommends", "--download-only",
              "install", *debs.packages),
             description=f"download {', '.join(debs.packages)} ({debs.suite} {debs.arch}) and "
                         "their dependencies"),
        Step(("sh", "-c", 'for d in "$1"/*.deb; do dpkg -x "$d" "$2" || exit 1; done', "sh",
              str(state / "archives"), str(dest)),
             description=f"unpack them into {dest}"),
    ]


def provision(state_dir: Path, emu: Emulator, *, log: Path, verbose: bool = False) -> list[str]:
    """``cuforge emulation setup``: the emulator, the target root, the compiler wrappers and
    the binfmt_misc registration. Idempotent; returns what it did, one line per part."""
    state = state_dir
    home = emu.home(state)
    done = []
    missing = [p for p in emu.apt_packages if not _dpkg_installed(p)]
    if missing:
        _need_root(f"install {', '.join(missing)}")
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        install = Step(("apt-get", "install", "-y", "-q", "--no-install-recommends", *missing),
                       tuple(env.items()), description=f"install {', '.join(missing)}")
        try:
            run(install, log=log, stream=verbose, error=ToolchainError)
        except ToolchainError:   # stale lists on a fresh machine
            run(Step(("apt-get", "update", "-q"), description="apt-get update"), log=log,
                stream=verbose, error=ToolchainError)
            run(install, log=log, stream=verbose, error=ToolchainError)
        done.append(f"installed {', '.join(missing)}")
    root = emu.root_dir(state)
    parts = [("qemu", emu.qemu, home / "qemu", emu.qemu_path(state), ".cuforge-debs"),
             ("root", emu.root, root, root / ".cuforge-root", ".cuforge-debs")]
    if emu.toolchain is not None:   # into the root, after it (a new root drops its marker)
        parts.append(("toolchain", emu.toolchain, root, root, TOOLCHAIN_MARKER))
    for name, debs, dest, ready, marker_name in parts:
        stamp = "\n".join([debs.suite, debs.arch, *debs.packages])
        marker = dest / marker_name
        if ready.exists() and marker.is_file() and marker.read_text() == stamp:
            continue
        if name != "toolchain":
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
        for step in unpack_steps(emu, debs, home / "apt" / name, dest):
            run(step, log=log, stream=verbose, error=ToolchainError)
        if name == "root":
            (dest / ".cuforge-root").write_text(emu.platform + "\n")
        for link, target in emu.toolchain_links.items() if name == "toolchain" else ():
            (dest / link).unlink(missing_ok=True)
            (dest / link).symlink_to(target)
        marker.write_text(stamp)
        done.append(f"unpacked {', '.join(debs.packages)} ({debs.suite} {debs.arch}) into {dest}")
    write_wrappers(emu, state)
    done.append(register(emu, emu.qemu_path(state)))
    return done


def write_wrappers(emu: Emulator, state_dir: Path) -> None:
    """``<home>/bin/<name>``: each cross compiler with the target root as its sysroot, so
    ``<Python.h>``'s multiarch ``pyconfig.h`` and libc come from the target's own files."""
    out = emu.wrappers(state_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = emu.root_dir(state_dir)
    for name, real in emu.cross_compilers.items():
        path = out / name
        path.write_text("#!/bin/sh\n# written by `cuforge emulation setup`\n"
                        f"exec {shlex.quote(real)} --sysroot={shlex.quote(str(root))} \"$@\"\n")
        path.chmod(0o755)


def register(emu: Emulator, qemu: Path) -> str:
    """Register ``qemu`` for the platform's ELF header with binfmt_misc (mounting it first).
    Flag F opens the emulator now, so the registration holds in every mount namespace."""
    entry = BINFMT / emu.binfmt_name
    if entry.exists():
        if _binfmt_entry(entry).get("interpreter") == str(qemu):
            return f"binfmt_misc: {emu.binfmt_name} already registered ({qemu})"
        _need_root("replace the binfmt_misc registration")
        entry.write_text("-1")    # unregister, then register again with this emulator
    _need_root("register the emulator with binfmt_misc")
    if not (BINFMT / "register").exists():
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)],
                       capture_output=True, text=True)
    if not (BINFMT / "register").exists():
        raise ToolchainError(f"binfmt_misc is not available ({BINFMT}/register is missing, "
                             "and mounting it failed)",
                             hint=f"run as root on a kernel with binfmt_misc: `mount -t "
                                  f"binfmt_misc binfmt_misc {BINFMT}`; in a container, start it "
                                  "--privileged")
    spec = (f":{emu.binfmt_name}:M::".encode() + _binfmt_escape(emu.binfmt_magic) + b":"
            + _binfmt_escape(emu.binfmt_mask) + f":{qemu}:F".encode())
    with open(BINFMT / "register", "wb") as fh:
        fh.write(spec)
    return f"binfmt_misc: registered {emu.binfmt_name} -> {qemu}"


def _binfmt_escape(data: bytes) -> bytes:
    return "".join(f"\\x{b:02x}" for b in data).encode()


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ToolchainError(f"emulation setup must {what}, which needs root",
                             hint="run `sudo cuforge emulation setup` (once per machine boot "
                                  "for the binfmt_misc registration)")


def _dpkg_installed(package: str) -> bool:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", package],
                             capture_output=True, text=True)
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.endswith("installed")


@dataclass(frozen=True)
class Finding:
    ok: bool
    what: str
    fix: str = ""
    brief: str = ""   # doctor's shorter line, where ``what`` names things of another checkout


def _binfmt_entry(path: Path) -> dict[str, str]:
    text = path.read_text()
    fields = {"enabled": text.splitlines()[0].strip()} if text else {}
    for line in text.splitlines()[1:]:
        key, _, value = line.partition(" ")
        fields[key] = value.strip()
    return fields


def registered_emulators(emu: Emulator) -> list[tuple[str, dict[str, str]]]:
    """Every enabled binfmt_misc entry whose magic is the platform's ELF header."""
    if not BINFMT.is_dir():
        return []
    found = []
    for path in sorted(BINFMT.iterdir()):
        if path.name in ("register", "status"):
            continue
        try:
            fields = _binfmt_entry(path)
        except OSError:
            continue
        magic = bytes.fromhex(fields.get("magic", ""))
        mask = bytes.fromhex(fields.get("mask", "")) or b"\xff" * len(magic)
        wanted = bytes(a & b for a, b in zip(emu.binfmt_magic, mask))
        if fields.get("enabled") == "enabled" and magic and magic == wanted:
            found.append((path.name, fields))
    return found


def qemu_version(qemu: str) -> Version | None:
    try:
        out = subprocess.run([qemu, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version (\d+\.\d+(?:\.\d+)?)", out.stdout)
    try:
        return Version(m[1]) if m else None
    except InvalidVersion:
        return None


def check(state_dir: Path, emu: Emulator, *, torch_python: Path | None = None) -> list[Finding]:
    """Is ``emu.platform`` emulation usable here? binfmt registration, the QEMU it runs and
    its version, the target root's Python; with ``torch_python`` (an emulated combo env)
    also ``import torch`` (about 30 s emulated)."""
    state = state_dir
    fix_setup = (f"`sudo cuforge emulation setup --platform {emu.platform}`: downloads Debian "
                 f"{emu.qemu.suite}'s {' '.join(emu.qemu.packages)} (QEMU >= {emu.min_qemu}, "
                 f"a static {Path(emu.qemu_binary).name}) and the {emu.root.suite} "
                 f"{emu.root.arch} root, and registers it with binfmt_misc")
    entries = registered_emulators(emu)
    if not entries:
        return [Finding(False, f"{emu.platform} binaries: no binfmt_misc registration "
                        f"({BINFMT} {'mounted' if (BINFMT / 'register').exists() else 'not mounted'})",
                        fix_setup)]
    name, fields = entries[0]
    qemu = fields.get("interpreter", "?")
    version = qemu_version(qemu)
    if _another_checkouts(qemu, emu, state_dir):
        # it runs today, but from a tree this checkout does not own: deleting that clone
        # breaks every build here, and this checkout's own QEMU is not there
        out = [Finding(False, f"{emu.platform} binaries run by another checkout's QEMU, {qemu} "
                       f"(binfmt_misc {name}); this checkout has none at "
                       f"{emu.qemu_path(state_dir)}", fix_setup,
                       brief=f"{emu.platform}: this checkout has no QEMU of its own")]
    else:
        out = [Finding(version is not None and version >= emu.min_qemu,
                       f"{emu.platform} binaries run by {qemu} (binfmt_misc {name}, QEMU "
                       f"{version or 'version unknown'})",
                       "" if version and version >= emu.min_qemu else
                       f"QEMU {version} crashes in `import torch` (bookworm's 7.2 does); "
                       f"{fix_setup}")]
    missing = [p for p in emu.apt_packages if not _dpkg_installed(p)]
    if missing:
        out.append(Finding(False, f"cross compilers: {', '.join(missing)} not installed",
                           fix_setup))
    else:
        out += _cross_compilers(state, emu, fix_setup)
    for version_name in emu.pythons:
        py = emu.python(state, version_name)
        if not py.exists():
            out.append(Finding(False, f"{emu.platform} Python {version_name}: not provisioned "
                               f"({py})", fix_setup))
            continue
        proc = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_platform())"],
                              capture_output=True, text=True, env=environment(state_dir, emu))
        machine = proc.stdout.strip()
        out.append(Finding(proc.returncode == 0 and machine == emu.platform,
                           f"{emu.platform} Python {version_name} ({py}): "
                           f"{machine or proc.stderr.strip()[-200:]}", fix_setup))
    if torch_python is not None and torch_python.exists():
        proc = subprocess.run([str(torch_python), "-c", TORCH_CHECK],
                              capture_output=True, text=True, env=environment(state_dir, emu))
        said = proc.stdout.strip() or proc.stderr.strip()[-300:] or f"exit {proc.returncode}"
        out.append(Finding(proc.returncode == 0, f"import torch under emulation "
                           f"({torch_python}): {said}", fix_setup))
    return out


def _another_checkouts(qemu: str, emu: Emulator, state_dir: Path) -> bool:
    """Is the registered ``qemu`` the QEMU that ``emulation setup`` provisioned in another
    cuforge state dir (another clone's ``.cuforge/emulation/<platform>/qemu/...``)? A state
    dir whose emulation folder links to the registered one (the bench's) owns it too."""
    own = emu.qemu_path(state_dir)
    tail = Path("emulation", emu.platform, "qemu", emu.qemu_binary)
    return (Path(qemu).resolve() != own.resolve()
            and Path(qemu).as_posix().endswith("/" + tail.as_posix()))


def verdict(ok: bool) -> str:
    """A finding's word, the same in ``cuforge emulation status`` and doctor: emulation is
    optional, so what is missing is "not yet", never a failure of the machine."""
    return "ok" if ok else "not yet"


def _cross_compilers(state_dir: Path, emu: Emulator, fix: str) -> list[Finding]:
    """The sysroot wrapper of each C++ cross compiler, probed as a build's host compiler."""
    from cuforge.env import hostcxx
    out = []
    for name in (n for n in emu.cross_compilers if "++" in n):
        wrapper = emu.wrappers(state_dir) / name
        if not wrapper.exists():
            out.append(Finding(False, f"host compiler {name}: no wrapper at {wrapper}", fix))
            continue
        try:
            compiler = hostcxx.probe(str(wrapper))
        except ToolchainError as err:
            out.append(Finding(False, f"host compiler {name}: {err}", fix))
            continue
        out.append(Finding(not compiler.static_libstdcxx, f"host compiler {compiler.describe()}",
                           fix))
    return out
