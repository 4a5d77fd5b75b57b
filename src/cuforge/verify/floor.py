"""The oldest C library a wheel runs on: its *floor*, read from the symbol versions and
``DT_NEEDED`` of every ELF file in it, and the lowest manylinux policy (PEP 600,
``data/manylinux.toml``) that holds.

A wheel compiled here says ``linux_x86_64``, which promises nothing, yet the static CUDA
runtime in it needs ``pthread_join@GLIBC_2.34`` when it is linked on glibc 2.36. The floor
names that: the highest ``GLIBC_``, ``GLIBCXX_``, ``CXXABI_`` and ``GCC_`` version any file
needs from the system, each with the symbols and the library it comes from. Libraries that
torch's wheel (or its nvidia-* wheels, or the NVIDIA driver) brings are left out, and noted:
torch's own tag answers for them. A library of the wheel itself is no system library either.

Publishing tags the wheel ``manylinux_2_X_<arch>`` with the lowest level that holds
(``publish.rewrite``); the ``glibc`` check holds the floor to a ceiling (``verify.glibc``);
``setup --wheels`` refuses a team wheel whose floor is above this machine's glibc.

>>> version("2.34"), version("TM_1")
((2, 34), None)
>>> glibc_of_tag("manylinux_2_28_x86_64"), glibc_of_tag("manylinux2014_x86_64")
((2, 28), (2, 17))
>>> glibc_of_tag("linux_x86_64") is None
True
>>> policy_at("x86_64", (2, 17)).tag("x86_64")
'manylinux_2_17_x86_64.manylinux2014_x86_64'
"""

from __future__ import annotations

import os
import platform
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

from cuforge import data
from cuforge.core.elf import ELF_MAGIC, ElfLib, is_elf

Ver = tuple[int, ...]

#: the namespaces a floor counts; what each is called where people read it
NAMESPACES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC", "ZLIB", "LIBATOMIC")
_VERSIONED = re.compile(r"^(?P<ns>[A-Z]+)_(?P<rest>.+)$")
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def version(text: str) -> Ver | None:
    """``"2.34"`` -> ``(2, 34)``; a name that is no number (``TM_1``, ``PRIVATE``) -> None."""
    parts = text.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def dotted(v: Ver) -> str:
    return ".".join(map(str, v))


def glibc_of_tag(tag: str) -> Ver | None:
    """The glibc a platform tag promises: ``manylinux_2_28_x86_64`` -> ``(2, 28)``, the legacy
    aliases too; ``linux_*`` and others promise nothing (None)."""
    m = re.match(r"^manylinux_(\d+)_(\d+)_", tag)
    if m:
        return int(m[1]), int(m[2])
    return next((v for name, v in _LEGACY.items() if tag.startswith(name + "_")), None)


@dataclass(frozen=True)
class Policy:
    """One manylinux level: the glibc it promises, the newest version of each other namespace
    its reference libstdc++/libgcc_s/zlib define, the named versions, the libraries a wheel may
    link."""

    glibc: Ver
    aliases: tuple[str, ...]
    limits: tuple[tuple[str, Ver], ...]
    named: frozenset[str]
    libraries: frozenset[str]

    @property
    def name(self) -> str:
        return "manylinux_" + "_".join(map(str, self.glibc))

    def tag(self, machine: str) -> str:
        """The platform part of a file name: the level and its aliases, joined by a dot."""
        return ".".join(f"{n}_{machine}" for n in (self.name, *self.aliases))

    def limit(self, namespace: str) -> Ver | None:
        if namespace == "GLIBC":
            return self.glibc
        return dict(self.limits).get(namespace)

    def allows(self, need: str) -> bool:
        """Whether a symbol version (``GLIBCXX_3.4.30``) is one this level defines."""
        if need in self.named:
            return True
        m = _VERSIONED.match(need)
        v = version(m["rest"]) if m else None
        top = self.limit(m["ns"]) if m else None
        return v is not None and top is not None and v <= top


@cache
def policies(machine: str) -> tuple[Policy, ...]:
    """The levels ``data/manylinux.toml`` knows for ``machine``, lowest first (none for a
    machine it does not list)."""
    table = data.table("manylinux")
    libraries = set(table["libraries"])
    loader = table["loader"].get(machine)
    if loader:
        libraries.add(loader)
    out = []
    for row in table["policy"]:
        libraries |= set(row.get("libraries_since", ()))
        limits = row.get(machine)
        if limits is None:
            continue
        out.append(Policy(version(row["glibc"]), tuple(row.get("aliases", ())),
                          tuple((k, version(v)) for k, v in limits.items() if k != "named"),
                          frozenset(limits.get("named", ())), frozenset(libraries)))
    return tuple(sorted(out, key=lambda p: p.glibc))


def policy_at(machine: str, glibc: Ver) -> Policy | None:
    """The limits of a machine whose glibc is ``glibc``: the highest level at or below it,
    promising exactly ``glibc`` (2.30 keeps 2_28's libstdc++ limits). None below them all."""
    below = [p for p in policies(machine) if p.glibc <= glibc]
    return replace(below[-1], glibc=glibc) if below else None


def torch_brings(soname: str) -> bool:
    """Whether torch's wheel, its CUDA wheels or the NVIDIA driver provide ``soname``."""
    return any(fnmatch(soname, p) for p in data.table("manylinux")["torch_brings"])


@dataclass(frozen=True)
class Need:
    """One symbol version the wheel needs from a system library, and what asks for it."""

    version: str                 # GLIBC_2.34
    library: str                 # libc.so.6
    symbols: tuple[str, ...]     # pthread_join, ...
    files: tuple[str, ...]       # the wheel's files that need it

    @property
    def namespace(self) -> str:
        m = _VERSIONED.match(self.version)
        return m["ns"] if m else self.version

    @property
    def number(self) -> Ver | None:
        m = _VERSIONED.match(self.version)
        return version(m["rest"]) if m else None

    def words(self, most: int = 4) -> str:
        """``GLIBC_2.34 from libc.so.6: pthread_join, dlerror (+3 more)``."""
        shown = ", ".join(self.symbols[:most])
        more = f" (+{len(self.symbols) - most} more)" if len(self.symbols) > most else ""
        return f"{self.version} from {self.library}" + (f": {shown}{more}" if shown else "")


@dataclass(frozen=True)
class Floor:
    """What a wheel's ELF files need from the system, and the lowest policy that holds."""

    machine: str
    needs: tuple[Need, ...]                 # on system libraries, torch's left out
    libraries: tuple[str, ...]              # system libraries its files link (DT_NEEDED)
    left_out: tuple[str, ...] = ()          # torch's, CUDA's, the driver's: not counted
    foreign: tuple[str, ...] = ()           # linked, but no policy lets a wheel link them
    policy: Policy | None = field(default=None, compare=False)
    why: str = ""                           # why no policy holds ("" when one does)

    def highest(self, namespace: str) -> Ver | None:
        found = [n.number for n in self.needs if n.namespace == namespace and n.number]
        return max(found) if found else None

    @property
    def glibc(self) -> Ver | None:
        return self.highest("GLIBC")

    @property
    def glibcxx(self) -> Ver | None:
        return self.highest("GLIBCXX")

    @property
    def cxxabi(self) -> Ver | None:
        return self.highest("CXXABI")

    def text(self) -> str:
        """``glibc >= 2.34, GLIBCXX_3.4.30``: what a machine needs (libstdc++ only when the
        wheel uses it)."""
        parts = [f"glibc >= {dotted(self.glibc)}" if self.glibc else "glibc: any"]
        if self.glibcxx:
            parts.append(f"GLIBCXX_{dotted(self.glibcxx)}")
        return ", ".join(parts)

    def tag(self) -> str:
        """The platform tag it earns: ``manylinux_2_34_x86_64``, or ``linux_x86_64``."""
        return self.policy.tag(self.machine) if self.policy else f"linux_{self.machine}"

    def above(self, limit: Policy) -> list[Need]:
        """The needs ``limit`` does not hold, highest first within each namespace."""
        out = [n for n in self.needs if not limit.allows(n.version)]
        return sorted(out, key=lambda n: (n.namespace, n.number or ()), reverse=True)

    def to_dict(self) -> dict:
        """What the manifest and ``--json`` record (docs/json.md)."""
        return {"text": self.text(), "tag": self.tag(), "why": self.why,
                "glibc": dotted(self.glibc) if self.glibc else "",
                "glibcxx": dotted(self.glibcxx) if self.glibcxx else "",
                "cxxabi": dotted(self.cxxabi) if self.cxxabi else "",
                "left_out": list(self.left_out)}


def _choose(floor: Floor) -> Floor:
    """The floor with its policy (the lowest level that holds), or why none does."""
    if floor.foreign:
        return replace(floor, why=f"links {', '.join(floor.foreign)}, which no manylinux "
                       "policy lets a wheel link (nor torch's wheel brings)")
    known = policies(floor.machine)
    if not known:
        return replace(floor, why=f"no manylinux policy is known for {floor.machine}")
    for p in known:
        if not floor.above(p) and set(floor.libraries) <= p.libraries:
            return replace(floor, policy=p)
    top = known[-1]
    over = floor.above(top)
    return replace(floor, why=f"needs {', '.join(n.version for n in over[:3])}, which even "
                   f"{top.name} does not define" if over else
                   f"links {', '.join(sorted(set(floor.libraries) - top.libraries))}")


def _elf_machine(lib: ElfLib) -> str:
    names = {row["elf_machine"]: row["machine"] for row in data.table("platforms").values()}
    return names.get(lib.elf["e_machine"], str(lib.elf["e_machine"]))


def floor_of(files: Iterable[tuple[str, ElfLib]]) -> Floor | None:
    """The floor of a set of ELF files (``(name in the wheel, opened file)``; each is closed
    here); None when there are none (a pure-Python wheel)."""
    opened = list(files)
    if not opened:
        return None
    own = {Path(name).name for name, _ in opened}
    needs: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
    linked: set[str] = set()
    machine = ""
    try:
        for name, lib in opened:
            machine = machine or _elf_machine(lib)
            own |= {lib.soname} if lib.soname else set()
            for soname in lib.needed:
                linked.add(soname)
            for need in lib.version_needs():
                syms, where = needs.setdefault((need.library, need.version), (set(), set()))
                syms.update(need.symbols)
                where.add(name)
    finally:
        for _, lib in opened:
            lib.close()
    system = sorted(s for s in linked if s not in own and not torch_brings(s))
    left_out = sorted(s for s in linked if s not in own and torch_brings(s))
    allowed = set().union(*(p.libraries for p in policies(machine))) if policies(machine) \
        else set(system)
    counted = [Need(v, lib, tuple(sorted(syms)), tuple(sorted(where)))
               for (lib, v), (syms, where) in sorted(needs.items())
               if lib not in own and not torch_brings(lib)]
    return _choose(Floor(machine, tuple(counted), tuple(system), tuple(left_out),
                         tuple(s for s in system if s not in allowed)))


def floor_of_wheel(wheel: Path) -> Floor | None:
    """The floor of every ELF file in ``wheel``, read from the zip (no unpacking)."""
    with zipfile.ZipFile(wheel) as zf:
        files = []
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            if info.is_dir():
                continue
            with zf.open(info) as f:
                if f.read(4) != ELF_MAGIC:
                    continue
            files.append((info.filename, ElfLib(Path(info.filename), zf.read(info))))
    return floor_of(files)


def floor_of_tree(root: Path) -> Floor | None:
    """The floor of every ELF file under an unpacked wheel ``root``."""
    def opened() -> Iterator[tuple[str, ElfLib]]:
        for path in sorted(root.rglob("*")):
            if not path.is_symlink() and path.is_file() and is_elf(path):
                yield str(path.relative_to(root)), ElfLib(path)
    return floor_of(opened())


# -- the machines a floor is held to ---------------------------------------------------------------
@dataclass(frozen=True)
class Ceiling:
    """The newest glibc a combo's wheels may need, and where that limit comes from.
    ``declared``: the combo's ``glibc_floor`` (a wheel above it fails); else torch's own tag
    (a wheel above it runs on fewer machines than its torch: a warning)."""

    glibc: Ver
    source: str
    declared: bool = False

    def text(self) -> str:
        return f"glibc {dotted(self.glibc)} ({self.source})"


def wheel_tag_glibc(tags: Iterable[str]) -> Ver | None:
    """The glibc a wheel's platform tags promise: the lowest manylinux one (None if none)."""
    found = [v for t in tags if (v := glibc_of_tag(t))]
    return min(found) if found else None


def torch_ceiling(site_packages: Path) -> Ceiling | None:
    """The floor torch's own wheel promises, from its ``.dist-info/WHEEL`` Tag lines in the
    env (``manylinux_2_28_x86_64`` -> 2.28); None for a torch without a manylinux tag."""
    for info in sorted(Path(site_packages).glob("torch-*.dist-info")):
        try:
            text = (info / "WHEEL").read_text()
        except OSError:
            continue
        tags = [line.split(":", 1)[1].strip().rsplit("-", 1)[-1]
                for line in text.splitlines() if line.startswith("Tag:")]
        glibc = wheel_tag_glibc(tags)
        if glibc:
            torch = info.name.removeprefix("torch-").removesuffix(".dist-info")
            return Ceiling(glibc, f"torch {torch}'s tag {min(tags, key=lambda t: glibc_of_tag(t) or (99,))}")
    return None


def machine_glibc() -> Ver | None:
    """This machine's glibc (``os.confstr``, else ``platform.libc_ver``); None on a musl or
    other C library."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        text = ""
    name, _, number = text.partition(" ")
    if name != "glibc":
        lib, number = platform.libc_ver()
        if lib != "glibc":
            return None
    return version(number)
