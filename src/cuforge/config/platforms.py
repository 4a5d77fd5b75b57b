"""Target platforms (``linux-x86_64``, ``linux-aarch64``): the wheelhouse directory name, the
wheel tags that fit, how uv names the platform, and the rule that a build runs on its platform.

>>> get("linux-aarch64").accepts("demo-0.1-cp312-cp312-linux_aarch64.whl")
True
>>> get("linux-aarch64").accepts("demo-0.1-cp312-cp312-linux_x86_64.whl")
False
"""

from __future__ import annotations

import platform as _platform
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import cache

from packaging.utils import parse_wheel_filename

from cuforge import data
from cuforge.core.errors import ConfigError


# The variable QEMU's user-mode loader reads for the target's userland (its sysroot).
EMULATOR_ROOT_VAR = "QEMU_LD_PREFIX"


@dataclass(frozen=True)
class Platform:
    name: str                      # linux-aarch64: also the wheelhouse's top directory
    machine: str                   # aarch64: `uname -m` of a machine that can build it
    uv_platform: str               # aarch64-manylinux_2_28: uv's --python-platform
    wheel_tags: tuple[str, ...]    # fnmatch patterns of platform tags that fit
    cuda_target: str = ""          # sbsa-linux: the toolkit's targets/<name> folder
    elf_machine: str = ""          # EM_AARCH64: e_machine of its binaries
    triplet: str = ""              # aarch64-linux-gnu: its libraries' multiarch folder

    def accepts(self, wheel_name: str) -> bool:
        """True when some tag of the wheel runs on this platform (``any`` runs everywhere)."""
        tags = parse_wheel_filename(wheel_name)[3]
        return any(t.platform == "any" or any(fnmatch(t.platform, p) for p in self.wheel_tags)
                   for t in tags)


@cache
def known() -> dict[str, Platform]:
    """The table in ``data/platforms.toml``."""
    return {name: Platform(name, row["machine"], row["uv_platform"], tuple(row["wheel_tags"]),
                           row["cuda_target"], row["elf_machine"], row["triplet"])
            for name, row in data.table("platforms").items()}


def get(name: str, *, where: str = "platform") -> Platform:
    try:
        return known()[name]
    except KeyError:
        raise ConfigError(f"{where}: unknown platform {name!r}",
                          hint=f"use one of {', '.join(known())} "
                               "(src/cuforge/data/platforms.toml)") from None


@cache
def build_platform() -> Platform:
    """The platform of this machine, where cuforge runs and builds (one not in the table
    still gets a usable name). The platform the wheels are for is a combo's
    ``target_platform``."""
    machine = _platform.machine()
    for p in known().values():
        if p.machine == machine:
            return p
    return Platform(f"linux-{machine}", machine, f"{machine}-manylinux_2_28",
                    (f"linux_{machine}", f"manylinux*_{machine}"), f"{machine}-linux",
                    f"EM_{machine.upper()}", f"{machine}-linux-gnu")


def is_foreign(platform: Platform) -> bool:
    """Whether ``platform``'s code cannot run natively here (it needs emulation)."""
    return platform.machine != build_platform().machine


def by_elf_machine(elf_machine: str) -> Platform:
    """The platform whose binaries carry ``elf_machine`` (this machine's for an unknown one).

    >>> by_elf_machine("EM_AARCH64").triplet
    'aarch64-linux-gnu'
    """
    return next((p for p in known().values() if p.elf_machine == elf_machine), build_platform())
