"""Building another platform's wheels on this machine by emulation, on request.

A combo with ``emulate = true`` (or ``cuforge build --emulate``) targeting linux-aarch64 on an
x86_64 machine runs cuforge's normal build: its env's Python is the target's (a Debian arm64
interpreter that the kernel hands to QEMU through binfmt_misc), so torch, setup.py, CMake,
pip, the import check and the env probe all run as aarch64 code. Two kinds of step run
natively instead, because they are pure translators whose output does not depend on the
machine they run on (``envs/emulation.toml`` lists them): the host C++ compiler (Debian's
cross compiler with the target root as its sysroot) and CUDA's device compilers (the same
pinned wheels' x86_64 build, told the target's directory with ``-target-dir``).

What this module owns: the table, and the variables a build's commands run with (the loader's
root, the sysroot compiler wrappers on ``PATH``, the nvcc flags), which
``cuforge.env.target`` puts into each command's own environment, and the native tools an
emulated env gets. Provisioning (``cuforge emulation setup``) and the health check
``cuforge doctor`` shows are ``cuforge.env.emulation_setup``'s.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from cuforge.core.errors import ConfigError, ToolchainError
from cuforge.core.project import Project
from cuforge.core.runner import Step, run
from cuforge.core.tomlfile import read_toml

TABLE = "emulation.toml"
TOOLCHAIN_MARKER = ".cuforge-toolchain-debs"   # in the root: its native_toolchain is unpacked


@dataclass(frozen=True)
class DebSet:
    """Debian packages of one suite and architecture, unpacked into one directory."""

    suite: str
    arch: str
    packages: tuple[str, ...]


@dataclass(frozen=True)
class Emulator:
    """One row of ``envs/emulation.toml``: how to run a platform's code here."""

    platform: str
    binfmt_name: str
    binfmt_magic: bytes
    binfmt_mask: bytes
    mirror: str
    apt_packages: tuple[str, ...]
    qemu: DebSet
    qemu_binary: str
    min_qemu: Version
    root: DebSet
    toolchain: DebSet | None       # the target's own compilers, unpacked into the root too
    toolchain_links: dict[str, str]   # root-relative path -> link target (maintainer scripts')
    pythons: dict[str, str]
    cross_compilers: dict[str, str]
    native_wheels: tuple[str, ...]
    native_files: tuple[str, ...]
    nvcc_flags: str

    def home(self, state_dir: Path) -> Path:
        return state_dir / "emulation" / self.platform

    def root_dir(self, state_dir: Path) -> Path:
        return self.home(state_dir) / "root"

    def qemu_path(self, state_dir: Path) -> Path:
        return self.home(state_dir) / "qemu" / self.qemu_binary

    def wrappers(self, state_dir: Path) -> Path:
        return self.home(state_dir) / "bin"

    def variables(self, state_dir: Path) -> dict[str, str]:
        """What every emulated command's environment gets: the target root for QEMU's loader,
        and nvcc's flags for the target (its sysroot, its machine)."""
        from cuforge.config.platforms import EMULATOR_ROOT_VAR
        out = {EMULATOR_ROOT_VAR: str(self.root_dir(state_dir))}
        if self.nvcc_flags:
            out["NVCC_PREPEND_FLAGS"] = self.nvcc_flags
        return out

    def python(self, state_dir: Path, version: str) -> Path:
        if version not in self.pythons:
            raise ConfigError(f"no {self.platform} Python {version} for emulation (envs/{TABLE} "
                              f"has {', '.join(self.pythons) or 'none'})",
                              hint=f"use a combo with python = one of those (e.g. spark-emulated),"
                                   f" or add the version's Debian packages to envs/{TABLE}")
        return self.root_dir(state_dir) / self.pythons[version]


def _escaped_bytes(text: str) -> bytes:
    r"""binfmt_misc's ``\xNN`` notation as bytes.

    >>> _escaped_bytes(r"\x7fELF")
    b'\x7fELF'
    """
    return text.encode("latin-1").decode("unicode_escape").encode("latin-1")


def load(project: Project) -> dict[str, Emulator]:
    path = project.envs_dir / TABLE
    if not path.is_file():
        return {}
    out = {}
    for name, row in read_toml(path, "emulation table").items():
        where = f"envs/{TABLE} [{name}]"
        try:
            q, r, n = row["qemu"], row["root"], row["native_tools"]
            t = row.get("native_toolchain")
            out[name] = Emulator(
                platform=name, binfmt_name=row["binfmt_name"],
                binfmt_magic=_escaped_bytes(row["binfmt_magic"]),
                binfmt_mask=_escaped_bytes(row["binfmt_mask"]),
                mirror=row["mirror"], apt_packages=tuple(row.get("apt_packages", ())),
                qemu=DebSet(q["suite"], q["arch"], tuple(q["packages"])),
                qemu_binary=q["binary"], min_qemu=Version(q["min_version"]),
                root=DebSet(r["suite"], r["arch"], tuple(r["packages"])),
                toolchain=DebSet(r["suite"], r["arch"], tuple(t["packages"])) if t else None,
                toolchain_links=dict((t or {}).get("links", {})),
                pythons=dict(row.get("pythons", {})),
                cross_compilers=dict(row.get("cross_compilers", {})),
                native_wheels=tuple(n.get("wheels", ())), native_files=tuple(n.get("files", ())),
                nvcc_flags=n.get("nvcc_flags", ""))
        except KeyError as err:
            raise ConfigError(f"{where}: missing key {err}") from None
    return out


def for_platform(project: Project, platform: str) -> Emulator:
    table = load(project)
    if platform not in table:
        raise ConfigError(f"no way to emulate {platform} here: envs/{TABLE} has "
                          f"{', '.join(table) or 'no platform'}",
                          hint=f"add a [{platform}] table to envs/{TABLE}")
    return table[platform]


# --- the build's environment ---------------------------------------------------------------


def environment(state_dir: Path, emu: Emulator) -> dict[str, str]:
    """This process's environment with what emulated builds need: the target root for the
    emulator's loader, the sysroot compiler wrappers first on PATH, nvcc's target directory."""
    env = dict(os.environ)
    env.update(emu.variables(state_dir))
    env["PATH"] = os.pathsep.join([str(emu.wrappers(state_dir)), os.environ.get("PATH", "")])
    return env


# --- native tools --------------------------------------------------------------------------


def installed_versions(site_packages: Path, names: tuple[str, ...]) -> dict[str, str]:
    """``name -> version`` of the distributions installed in ``site_packages``."""
    from importlib.metadata import distributions
    canon = {n.replace("_", "-").lower() for n in names}
    found = {}
    for dist in distributions(path=[str(site_packages)]):
        name = dist.metadata["Name"].replace("_", "-").lower()
        if name in canon:
            found[name] = dist.version
    return found


def install_native_tools(emu: Emulator, site_packages: Path, toolkit_root: Path, dest: Path,
                         *, log: Path, verbose: bool) -> None:
    """Replace the toolkit's compilers by this machine's build of the same wheels (the
    emulator's ``native_tools``): device code does not depend on the host they run on."""
    from cuforge.env.programs import find_uv
    steps = native_tools_steps(emu, site_packages, dest, find_uv())
    stamp = dest / ".cuforge-native-tools"
    want = json.dumps([s.argv for s in steps])
    if not (stamp.is_file() and stamp.read_text() == want):
        shutil.rmtree(dest, ignore_errors=True)
        for step in steps:
            run(step, log=log, stream=verbose, error=ToolchainError)
        stamp.write_text(want)
    overlay_native_tools(emu, dest, toolkit_root)


def native_tools_steps(emu: Emulator, site_packages: Path, dest: Path, uv: str) -> list[Step]:
    """uv's install of this machine's build of the env's own toolkit wheels (same versions)."""
    pins = installed_versions(site_packages, emu.native_wheels)
    absent = [n for n in emu.native_wheels if n not in pins]
    if absent:
        raise ToolchainError(f"the emulated env lacks {', '.join(absent)}, whose native build "
                             "replaces its compilers", hint="delete the env to recreate it")
    from cuforge.config import platforms
    here = platforms.build_platform()
    machine = here.machine
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return [Step((uv, "pip", "install", "--target", str(dest), "--no-deps",
                  "--python-platform", here.uv_platform, "--python-version", py,
                  *(f"{n}=={v}" for n, v in sorted(pins.items()))),
                 description=f"install the {machine} build of "
                             f"{', '.join(f'{n}=={v}' for n, v in sorted(pins.items()))}")]


def overlay_native_tools(emu: Emulator, native_site: Path, toolkit_root: Path) -> list[str]:
    """Hard-link the listed files of the native wheels over the assembled toolkit's own: the
    layout stays the one built from the target's wheels (headers, libraries, nvcc.profile)."""
    parts = sorted(p for p in (native_site / "nvidia").glob("*") if p.is_dir())
    replaced = []
    for rel in emu.native_files:
        source = next((p / rel for p in parts if (p / rel).is_file()), None)
        if source is None:
            raise ToolchainError(f"no {rel} in the native toolkit wheels at {native_site}",
                                 hint=f"fix native_tools in envs/{TABLE}")
        target = _own_path(toolkit_root, rel)
        if target.exists() and not target.is_symlink() and target.samefile(source):
            continue   # done by an earlier build: leave it (one may be compiling with it)
        target.unlink(missing_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
        replaced.append(rel)
    return replaced


def _own_path(root: Path, rel: str) -> Path:
    """``root / rel`` with every directory on the way a real one of the root's (the layout
    links whole directories of the wheels, which must stay untouched): a linked directory
    becomes a directory of links to its children."""
    here = root
    for part in Path(rel).parent.parts:
        here = here / part
        if here.is_symlink():
            real = here.resolve()
            here.unlink()
            here.mkdir()
            for child in real.iterdir():
                (here / child.name).symlink_to(child)
    return root / rel
