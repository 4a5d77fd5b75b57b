"""Check 3: which GPU code a ``.so`` really carries. nvcc embeds device code in the ELF
section ``.nv_fatbin``: one *container* per fatbinary (one compiled ``.cu`` file, i.e. one
kernel group), each holding SASS (``ELF``, a cubin for one ``sm_XY``) and PTX
(``compute_XY``, JIT-compiled by the driver at first load) entries.

Only reading the fatbin catches the silent arch trap (torch adds no ``-gencode`` when a flag
contains "arch", and nvcc then quietly builds its default ``sm_75``).

Container layout (little endian; checked against cuobjdump 13.x)::

    header (16 B):  u32 magic 0xBA55ED50 | u16 version (1) | u16 header size (16) | u64 payload size
    entry:          u16 kind (1 PTX, 2 ELF) | u16 version | u32 entry-header size
                    | u64 payload size (padded) | u32 compressed size (0: stored)
                    | u32 ?| u16 code minor | u16 code major | u32 arch (90 = sm_90)
                    | u32 name offset | u32 name size | u64 flags | u64 ? | u64 uncompressed size
                    then header padding up to the entry-header size, then the payload

Flags seen: 0x1 64-bit, 0x10 Linux, 0x2000 LZ4-compressed (CUDA <= 12), 0x8000 zstd-compressed
(CUDA 13 compresses PTX by default), 0x100000 arch-specific ``a`` (sm_90a), 0x200000 family
``f`` (sm_100f).

Compatibility rule used by the coverage check and the smoke's device check (NVIDIA's, kept
simple):

* SASS ``sm_XY`` runs on a device ``X.Z`` with ``Z >= Y`` (same major), except ``a`` cubins,
  which run only on exactly ``X.Y``. Exact SASS is "native"; same-major-older-minor is
  "compatible" (reported as a warning: sm_120 cubins on sm_121 are contested).
* PTX ``compute_XY`` is JIT-compiled on any device ``>= X.Y`` (``a``/``f`` PTX: same major only).

>>> Arch(9, 0) == arch_from_number(90)
True
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from cuforge.config.arches import Arch, ArchList, ArchTarget
from cuforge.core.elf import ElfLib, demangle
from cuforge.verify.checklist import CheckStatus as Status
from cuforge.verify.report import CheckResult, worst

FATBIN_MAGIC = 0xBA55ED50
SECTION = ".nv_fatbin"
KIND_PTX, KIND_ELF = 1, 2

FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a
FLAG_FAMILY = 0x200000  # sm_100f

DEFAULT_ARCH = Arch(7, 5)  # what nvcc 13 builds when given no arch flags

_HEADER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # the 64 fixed bytes of an entry header
ARCH_FIELD = struct.calcsize("<HHIQIIHH")  # where an entry header's u32 arch sits (28)

Runs = Literal["native", "compatible", "ptx"]


@dataclass(frozen=True)
class FatbinEntry:
    """One image in a container: SASS (``kind == "sass"``) or PTX for ``arch``."""

    kind: Literal["sass", "ptx", "other"]
    arch: Arch
    code_version: tuple[int, int]  # ELF: cubin format (1, 8); PTX: ISA version (9, 0)
    flags: int
    payload_size: int
    compressed: bool
    kernels: tuple[str, ...] | None  # mangled kernel names; None when unreadable (compressed)
    offset: int = 0  # of the entry header in the section (verify/ptxjit.py rewrites its arch)

    @property
    def is_sass(self) -> bool:
        return self.kind == "sass"

    @property
    def label(self) -> str:
        """``sm_120`` / ``compute_121`` (as cuobjdump names them, with a/f suffixes)."""
        return f"{'compute' if self.kind == 'ptx' else 'sm'}_{self.arch.number}"


@dataclass(frozen=True)
class FatbinContainer:
    """One fatbinary: the device code of one kernel group (usually one ``.cu`` file)."""

    index: int
    offset: int
    entries: tuple[FatbinEntry, ...]

    @property
    def sass(self) -> tuple[Arch, ...]:
        return tuple(sorted({e.arch for e in self.entries if e.kind == "sass"}))

    @property
    def ptx(self) -> tuple[Arch, ...]:
        return tuple(sorted({e.arch for e in self.entries if e.kind == "ptx"}))

    @property
    def kernels(self) -> tuple[str, ...] | None:
        """Mangled kernel names (from the first readable cubin), None if none is readable."""
        for e in self.entries:
            if e.kind == "sass" and e.kernels is not None:
                return e.kernels
        return None

    @property
    def is_link_stub(self) -> bool:
        """nvcc's device-link output when it links the .so itself: readable cubins without a
        single kernel and no PTX, or nothing at all when the device code is PTX only (seen:
        `nvcc -shared` for `code=compute_80` alone). The runtime never loads code from it, so
        coverage skips it."""
        if not self.entries:
            return True
        elves = [e for e in self.entries if e.kind == "sass"]
        return (bool(elves) and not self.ptx
                and all(e.kernels is not None and not e.kernels for e in elves))


def arch_from_number(number: int, flags: int = 0) -> Arch:
    """``120`` -> ``Arch(12, 0)``; the a/f flags become the suffix."""
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    return Arch(number // 10, number % 10, suffix)


def parse_fatbin(data: bytes) -> list[FatbinContainer]:
    """Parse the bytes of a ``.nv_fatbin`` section: containers follow each other, each
    padded so that the next starts at its magic. Raises ValueError on a corrupt section."""
    containers = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        magic, _version, header_size, size = _HEADER.unpack_from(data, offset)
        if magic != FATBIN_MAGIC:
            if not any(data[offset:]):  # zero padding at the end of the section
                break
            raise ValueError(f"bad fatbin magic {magic:#x} at offset {offset}")
        start, end = offset + header_size, offset + header_size + size
        if end > len(data):
            raise ValueError(f"fatbin container at {offset} runs past the section end")
        containers.append(FatbinContainer(len(containers), offset, tuple(_entries(data, start, end))))
        offset = _next_container(data, end)
    return containers


def _next_container(data: bytes, offset: int) -> int:
    """Where the next container starts: each object's ``.nv_fatbin`` keeps its alignment in
    the linked section, so zero bytes may follow a container up to the next multiple of it
    (8 on x86_64; 256 seen in an aarch64 .so linked by aarch64-linux-gnu-ld)."""
    magic = _HEADER.pack(FATBIN_MAGIC, 0, 0, 0)[:4]
    nxt = data.find(magic, offset)
    if nxt == -1 or any(data[offset:nxt]):   # no next container, or not only padding before it
        while offset < len(data) and offset % 8:
            offset += 1
        return offset
    return nxt


def _entries(data: bytes, pos: int, end: int):
    while pos + _ENTRY.size <= end:
        (kind, _ver, header_size, payload_size, compressed_size, _u, minor, major, arch,
         _name_off, _name_len, flags, _z, _raw_size) = _ENTRY.unpack_from(data, pos)
        if header_size == 0:
            break
        payload = data[pos + header_size: pos + header_size + payload_size]
        compressed = bool(compressed_size) or bool(flags & (FLAG_LZ4 | FLAG_ZSTD))
        name = {KIND_PTX: "ptx", KIND_ELF: "sass"}.get(kind, "other")
        kernels = _kernels(payload) if name == "sass" and not compressed else None
        yield FatbinEntry(name, arch_from_number(arch, flags), (major, minor), flags,
                          payload_size, compressed, kernels, pos)
        pos += header_size + payload_size


def _kernels(cubin: bytes) -> tuple[str, ...] | None:
    """Kernel names of a cubin: its ``.text.<mangled name>`` sections."""
    try:
        elf = ELFFile(io.BytesIO(cubin))
        names = [s.name for s in elf.iter_sections()]
    except (ELFError, struct.error, ValueError):
        return None
    return tuple(n.removeprefix(".text.") for n in names if n.startswith(".text."))


def read_fatbin(so: Path) -> list[FatbinContainer] | None:
    """The fatbin containers of ``so``; None when it has no ``.nv_fatbin`` (no device code)."""
    with ElfLib(so) as lib:
        data = lib.section_data(SECTION)
    return None if data is None else parse_fatbin(data)


# -- compatibility ---------------------------------------------------------------------------
def _sass_runs(code: Arch, device: Arch) -> Runs | None:
    if code.major != device.major:
        return None
    if code.minor == device.minor and (not device.suffix or code.suffix == device.suffix):
        return "native"
    if code.suffix != "a" and code.minor < device.minor and not device.suffix:
        return "compatible"
    return None


def _ptx_runs(code: Arch, device: Arch) -> bool:
    if code.suffix:
        return code.major == device.major and code.minor <= device.minor
    return (code.major, code.minor) <= (device.major, device.minor)


def runs_on(container: FatbinContainer, device: Arch) -> tuple[Runs, Arch] | None:
    """How ``container``'s kernels run on ``device``: best of native SASS, same-major SASS,
    PTX JIT (newest PTX at or below the device); None when nothing can run there.

    >>> c = FatbinContainer(0, 0, (FatbinEntry("ptx", Arch(7, 5), (9, 0), 0, 0, True, None),))
    >>> runs_on(c, Arch(12, 1))
    ('ptx', Arch(major=7, minor=5, suffix=''))
    """
    sass = [(r, a) for a in container.sass if (r := _sass_runs(a, device))]
    for kind in ("native", "compatible"):
        best = sorted((a for r, a in sass if r == kind), reverse=True)
        if best:
            return kind, best[0]
    ptx = sorted((a for a in container.ptx if _ptx_runs(a, device)), reverse=True)
    return ("ptx", ptx[0]) if ptx else None


# -- the check -------------------------------------------------------------------------------
def _group_name(c: FatbinContainer, names: dict[str, str]) -> str:
    kernels = c.kernels
    if kernels is None:  # compressed cubins: reading the names would need zstd/lz4
        return f"group #{c.index + 1}"
    shown = ", ".join(_short(names.get(k, k)) for k in kernels[:2])
    more = f" +{len(kernels) - 2} more" if len(kernels) > 2 else ""
    return f"group #{c.index + 1} ({shown}{more})"


def _short(name: str, limit: int = 50) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _listing(containers: list[FatbinContainer]) -> str:
    sass = sorted({a for c in containers for a in c.sass})
    ptx = sorted({a for c in containers for a in c.ptx})
    return (f"SASS {' '.join(f'sm_{a.number}' for a in sass) or 'none'}; "
            f"PTX {' '.join(f'compute_{a.number}' for a in ptx) or 'none'}; "
            f"{len(containers)} kernel group{'s' if len(containers) != 1 else ''}")


def coverage(containers: list[FatbinContainer],
             requested: ArchList | None) -> list[tuple[Status, str]]:
    """Notes ``(status, text)`` for ``requested`` against the kernel groups (stubs skipped):
    per target, one note per kind of finding naming the groups it concerns (PTX JIT,
    same-major SASS, nothing at all, missing ``+PTX``), plus one note listing extra arches."""
    if requested is None:
        return [("pass", "no requested arch list: listing only")]
    groups = [c for c in containers if not c.is_link_stub]
    names = demangle(k for c in groups for k in (c.kernels or ())[:2])
    notes: list[tuple[Status, str]] = []
    for target in requested:
        found: dict[tuple[Status, str], list[str]] = {}
        for c in groups:
            for status, text in _target_findings(c, target):
                found.setdefault((status, text), []).append(_group_name(c, names))
        notes += [(status, f"{target.arch}: {_groups(gs)}: {text}") for (status, text), gs in found.items()]
    wanted = {("sass", a) for a in requested.sass} | {("ptx", a) for a in requested.ptx}
    extra = sorted({(e.kind, e.arch) for c in groups for e in c.entries if e.kind != "other"}
                   - wanted, key=lambda ka: (ka[1], ka[0] != "sass"))
    if extra:
        labels = " ".join(f"{'compute' if k == 'ptx' else 'sm'}_{a.number}" for k, a in extra)
        why = (" (sm_75 is nvcc's default arch: unless requested on purpose, a .cu was compiled "
               "without the requested -gencode flags: the silent arch trap)"
               if DEFAULT_ARCH in {a for _, a in extra} else "")
        notes.append(("pass", f"extra arches not requested: {labels}{why}"))
    return notes


def _groups(names: list[str], shown: int = 3) -> str:
    """``group #2 (k)`` / ``3 kernel groups: group #1 (...), ... +1 more``."""
    if len(names) == 1:
        return names[0]
    more = f" +{len(names) - shown} more" if len(names) > shown else ""
    return f"{len(names)} kernel groups [{', '.join(names[:shown])}{more}]"


def _target_findings(c: FatbinContainer, target: ArchTarget) -> list[tuple[Status, str]]:
    """What is wrong or second-best for one group on one target (empty: native SASS)."""
    out: list[tuple[Status, str]] = []
    arch = target.arch
    if target.ptx and arch not in c.ptx:
        out.append(("fail", f"no compute_{arch.number} PTX ({target} requested)"))
    how = runs_on(c, arch)
    if how is None:
        out.append(("fail", "no SASS and no PTX that runs there"))
    elif how[0] == "compatible":
        out.append(("warn", f"no sm_{arch.number} SASS; runs sm_{how[1].number} SASS by "
                            "same-major compatibility (unverified on this arch)"))
    elif how[0] == "ptx":
        out.append(("warn", f"runs by PTX JIT from compute_{how[1].number} at first load (slow "
                            "first start, different code path)"))
    return out


def check_fatbin(so: Path, requested: ArchList | None) -> CheckResult:
    """Fail when a requested arch cannot run a kernel group, or ``+PTX`` lacks PTX; warn when
    it runs only by PTX JIT or same-major SASS; list extra arches. No fatbin: no device code.

    The first line of the detail is the worst finding (or the arch listing when all is well).
    """
    try:
        containers = read_fatbin(so)
    except ValueError as err:
        return CheckResult("fatbin", "fail", f"unreadable .nv_fatbin: {err}")
    if containers is None:
        return CheckResult("fatbin", "pass", "no device code (no .nv_fatbin section)")
    stubs = sum(c.is_link_stub for c in containers)
    listing = _listing([c for c in containers if not c.is_link_stub])
    if stubs:
        listing += f" (+{stubs} device-link stub{'s' if stubs > 1 else ''} without kernels)"
    if requested is not None and stubs == len(containers):
        # cumm's core_cc: a fatbin section, but no kernel to hold against the request
        return CheckResult("fatbin", "skipped",
                           f"skipped: nothing to check: {listing}, so no kernel can be held "
                           f"against the requested arches ({requested.torch(' ')})")
    notes = coverage(containers, requested)
    status = worst(s for s, _ in notes)
    if requested is not None and status is Status.PASS:
        listing += f"; native SASS for every requested arch ({requested.torch(' ')})"
    ordered = sorted(notes, key=lambda n: Status(n[0]).severity, reverse=True)
    lines = [text for _, text in ordered]
    if status is not Status.PASS:
        lines.insert(1, listing)
    else:
        lines.insert(0, listing)
    return CheckResult("fatbin", status, "\n".join(lines))
