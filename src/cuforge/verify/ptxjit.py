"""``--ptx-jit``: run a wheel's GPU code the way a GPU newer than its SASS runs it.

On the GPU at hand the driver picks a wheel's SASS; a newer GPU gets the PTX and the driver
JIT-compiles it (the DGX Spark's sm_121 running a ``12.0+PTX`` spconv). That is other
machine code, so a stress that passes on SASS says nothing of it, and ``CUDA_FORCE_PTX_JIT=1``
cannot tell it either: it is process-wide and stops torch's own kernels, which carry no PTX
for older GPUs. So the stress runs on a copy of the wheel's files in which every SASS image
the device would pick is relabeled, in its fatbin entry header, as code for the next major
arch (sm_90 -> "sm_100"), in the fatbin entry header and in the cubin's own ELF header (its
``e_flags``, which cuobjdump reads; a compressed cubin keeps its own): the driver passes it over
and JIT-compiles the PTX beside it. Sizes and offsets stay; only those fields change, in the copy.

>>> hidden_arch_number(Arch(9, 0)), hidden_arch_number(Arch(12, 1))
(100, 130)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cuforge.config.arches import Arch
from cuforge.core.elf import ElfLib, shared_objects
from cuforge.verify.fatbin import (_ENTRY, ARCH_FIELD, SECTION, FatbinContainer, FatbinEntry,
                                   _sass_runs, parse_fatbin, runs_on)

_E_FLAGS = 48   # offset of e_flags in an ELF64 header


@dataclass(frozen=True)
class HiddenSass:
    """What :func:`hide_sass` did under a tree."""

    libraries: int                 # shared objects changed
    images: int                    # SASS images relabeled
    groups: int                    # kernel groups that now run as JIT-compiled PTX
    without_ptx: tuple[str, ...]   # "lib.so: N groups": SASS only, left as it is

    def summary(self) -> str:
        """One line for the check's detail."""
        return (f"PTX JIT: {self.images} SASS images hidden in {self.libraries} libraries, "
                f"{self.groups} kernel groups JIT-compiled by the driver")


def hidden_arch_number(device: Arch) -> int:
    """The arch number a hidden image is labeled with: the next major, whose SASS a device
    of this major never runs (and still an arch the driver knows how to read)."""
    return (device.major + 1) * 10


def _hide_in(container: FatbinContainer, device: Arch) -> list[FatbinEntry]:
    """The entries to relabel: every SASS image the device could run, so that neither the
    native nor an older same-major image is picked instead. None in nvcc's device-link stub
    (no kernels: nothing of it runs either way)."""
    if container.is_link_stub or (runs := runs_on(container, device)) is None or runs[0] == "ptx":
        return []
    return [e for e in container.entries if e.is_sass and _sass_runs(e.arch, device)]


def _fatbin_at(so: Path) -> tuple[int, bytes] | None:
    """The file offset and bytes of the ``.nv_fatbin`` section, None without one."""
    with ElfLib(so) as lib:
        section = lib.elf.get_section_by_name(SECTION)
        return None if section is None else (section["sh_offset"], section.data())


def hide_sass(root: Path, device: Arch) -> HiddenSass:
    """Relabel, in place, the SASS ``device`` would run in every shared object under
    ``root`` (a copy: an unpacked wheel in the check's temp dir)."""
    libraries = images = groups = 0
    without_ptx = []
    for so in shared_objects(root):
        if (found := _fatbin_at(so)) is None:
            continue
        section_at, data = found
        patched, lost = bytearray(data), 0
        for container in parse_fatbin(data):
            if not (hidden := _hide_in(container, device)):
                continue
            if runs_on(_as_patched(container, hidden), device) is None:
                lost += 1   # no PTX to fall back on: left as it is, and said
                continue
            for entry in hidden:
                _relabel(patched, entry, hidden_arch_number(device))
            images += len(hidden)
            groups += 1
        if lost:
            without_ptx.append(f"{so.relative_to(root)}: {lost} groups")
        if patched != data:
            with open(so, "r+b") as f:
                f.seek(section_at)
                f.write(patched)
            libraries += 1
    return HiddenSass(libraries, images, groups, tuple(without_ptx))


def _relabel(section: bytearray, entry: FatbinEntry, number: int) -> None:
    """Label one SASS image as ``sm_<number>``: the entry header's arch, and the cubin's
    ``e_flags`` SM byte (bits 8-15 since CUDA 12.8's ELF ABI 8, bits 0-7 before)."""
    at = entry.offset + ARCH_FIELD
    section[at:at + 4] = number.to_bytes(4, "little")
    if entry.compressed:
        return
    flags_at = entry.offset + _ENTRY.unpack_from(section, entry.offset)[2] + _E_FLAGS
    flags = int.from_bytes(section[flags_at:flags_at + 4], "little")
    sm = entry.arch.major * 10 + entry.arch.minor
    for shift in (8, 0):
        if (flags >> shift) & 0xFF == sm:
            flags = flags & ~(0xFF << shift) | (number << shift)
            section[flags_at:flags_at + 4] = flags.to_bytes(4, "little")
            return


def _as_patched(container: FatbinContainer, hidden: list[FatbinEntry]) -> FatbinContainer:
    """The container as the driver sees it once the ``hidden`` images are passed over."""
    kept = tuple(e for e in container.entries if e not in hidden)
    return FatbinContainer(container.index, container.offset, kept)


def jit_cache_bytes(cache: Path) -> int:
    """Bytes in a driver JIT cache directory (``CUDA_CACHE_PATH``): 0 when nothing was
    JIT-compiled, or nothing could be written."""
    return sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.is_dir() else 0
