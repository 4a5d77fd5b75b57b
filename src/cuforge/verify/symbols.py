"""Check 2: would the dynamic loader resolve every symbol of a ``.so``? Done by reading ELF
files, as ``ld.so`` would, without importing torch: the ``.so``'s DT_NEEDED libraries are
looked up (its RUNPATH/RPATH with ``$ORIGIN``, torch/lib and the nvidia lib dirs, the wheel's
own dirs, ``ldconfig -p``, the system dirs) and followed transitively; the interpreter and
its libpython are searched too (``Py*`` symbols come from there). An undefined, non-weak
symbol that none of them exports is an ``undefined symbol`` error at import.

Also the CUDA runtime check: the .so's ``libcudart.so.N`` (or a static cudart) against
torch's CUDA major: two runtime majors in one process is a bug waiting to happen.

>>> cudart_major(("libstdc++.so.6", "libcudart.so.12"))
12
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cuforge.config import platforms
from cuforge.core.elf import ElfLib, demangle, is_elf
from cuforge.verify.report import CheckResult

_SHOWN = 12  # unresolved symbols listed per .so


def system_dirs(machine: str = "", sysroot: str = "") -> tuple[Path, ...]:
    """The default library dirs for binaries of ``machine`` (an ELF ``e_machine``; default this
    machine's), multiarch first, as Debian's ld.so does. Under emulation the loader that runs
    such a binary looks in its ``sysroot`` (the target's, cuforge.env.target) first, as
    here."""
    triplet = platforms.by_elf_machine(machine).triplet
    names = [f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    roots = [sysroot] if sysroot else []
    paths = [Path(r + n) for r in roots for n in names] + [Path(n) for n in names]
    return tuple(p for p in paths if p.is_dir())


@cache
def ldconfig_cache() -> dict[str, tuple[Path, ...]]:
    """``soname -> paths`` from ``ldconfig -p`` (empty when ldconfig is missing)."""
    out: dict[str, list[Path]] = {}
    for exe in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            text = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for m in re.finditer(r"^\s*(\S+) \(([^)]*)\) => (\S+)$", text, re.M):
            out.setdefault(m[1], []).append(Path(m[3]))
        break
    return {k: tuple(v) for k, v in out.items()}


@dataclass(frozen=True)
class SymbolResolution:
    """What the loader would leave unresolved for one ``.so``."""

    unresolved: tuple[str, ...]  # mangled names
    missing_libs: tuple[tuple[str, str], ...]  # (soname, needed by)
    searched: tuple[Path, ...]  # every library whose exports were searched

    @property
    def ok(self) -> bool:
        return not self.unresolved and not self.missing_libs


class LibrarySet:
    """Finds and opens shared libraries the way ``ld.so`` would, caching opened files.

    ``lib_dirs`` come after each library's own RUNPATH/RPATH and before the system (inside
    ``sysroot`` first, when emulation runs the binaries). Use as a context manager; it closes
    every library it opened.
    """

    def __init__(self, lib_dirs: Sequence[Path] = (), sysroot: str = "") -> None:
        self.lib_dirs = tuple(lib_dirs)
        self.sysroot = sysroot
        self._libs: dict[Path, ElfLib | None] = {}

    def __enter__(self) -> LibrarySet:
        return self

    def __exit__(self, *exc: object) -> None:
        for lib in self._libs.values():
            if lib is not None:
                lib.close()

    def open(self, path: Path) -> ElfLib | None:
        """The opened library at ``path`` (cached by real path); None if it is not ELF."""
        real = Path(os.path.realpath(path))
        if real not in self._libs:
            try:
                self._libs[real] = ElfLib(real) if is_elf(real) else None
            except (OSError, ValueError):
                self._libs[real] = None
        return self._libs[real]

    def candidates(self, soname: str, requester: ElfLib) -> Iterable[Path]:
        """Where ``soname`` may live, in the loader's order."""
        if "/" in soname:
            yield Path(soname)
            return
        for d in (*requester.search_dirs(), *self.lib_dirs):
            yield d / soname
        yield from ldconfig_cache().get(soname, ())
        for d in system_dirs(requester.elf.header["e_machine"], self.sysroot):
            yield d / soname

    def find(self, soname: str, requester: ElfLib) -> ElfLib | None:
        """The first candidate that exists and matches the requester's class and machine."""
        for path in self.candidates(soname, requester):
            if path.is_file() and (lib := self.open(path)) is not None and _compatible(lib, requester):
                return lib
        return None

    def closure(self, roots: Iterable[ElfLib]) -> tuple[list[ElfLib], list[tuple[str, str]]]:
        """Breadth-first DT_NEEDED closure of ``roots`` (roots included, load order);
        also returns the ``(soname, needed by)`` pairs that could not be found."""
        seen: dict[Path, ElfLib] = {}
        missing: list[tuple[str, str]] = []
        queue = deque(roots)
        while queue:
            lib = queue.popleft()
            if lib.path in seen:
                continue
            seen[lib.path] = lib
            for soname in lib.needed:
                dep = self.find(soname, lib)
                if dep is None:
                    missing.append((soname, lib.path.name))
                elif dep.path not in seen:
                    queue.append(dep)
        return list(seen.values()), missing


def _compatible(lib: ElfLib, requester: ElfLib) -> bool:
    # ld.so skips a library of another class or machine (a 32-bit libc in /usr/lib, say).
    a, b = lib.elf.header, requester.elf.header
    return lib.elf.elfclass == requester.elf.elfclass and a["e_machine"] == b["e_machine"]


def interpreter_path(python: Path) -> Path:
    """The real ELF file behind ``python`` (venvs link to the base interpreter)."""
    return Path(os.path.realpath(python))


def resolve(so: Path, libs: LibrarySet, *, python: Path | None = None) -> SymbolResolution:
    """Which undefined symbols of ``so`` no library in its DT_NEEDED closure (plus the
    interpreter's closure, when ``python`` is an ELF executable) exports."""
    target = libs.open(so)
    if target is None:
        raise ValueError(f"{so} is not an ELF shared object")
    roots = [target]
    if python is not None and (exe := libs.open(interpreter_path(python))) is not None:
        roots.append(exe)
    found, missing = libs.closure(roots)
    providers = [lib for lib in found if lib is not target]
    unresolved = tuple(name for name in target.undefined()
                       if not any(lib.defines(name) for lib in providers))
    return SymbolResolution(unresolved, tuple(missing), tuple(lib.path for lib in found))


def check_symbols(so: Path, libs: LibrarySet, *, python: Path | None = None) -> CheckResult:
    """Fail on unresolved symbols (listed demangled) and on DT_NEEDED libraries not found."""
    res = resolve(so, libs, python=python)
    if res.ok:
        return CheckResult("symbols", "pass",
                           f"all undefined symbols resolve ({len(res.searched) - 1} libraries searched)")
    lines = []
    if res.unresolved:
        names = demangle(res.unresolved[:_SHOWN])
        lines.append(f"{len(res.unresolved)} undefined symbol{'s' if len(res.unresolved) > 1 else ''}"
                     f" no library provides: {names[res.unresolved[0]]}")
        lines += [f"  {names[n]}  [{n}]" if names[n] != n else f"  {n}" for n in res.unresolved[:_SHOWN]]
        if len(res.unresolved) > _SHOWN:
            lines.append(f"  ... and {len(res.unresolved) - _SHOWN} more")
    for soname, by in res.missing_libs:
        lines.append(f"library {soname} (needed by {by}) not found in RUNPATH, torch/nvidia lib "
                     "dirs, the wheel or the system")
    if res.missing_libs and not res.unresolved:
        lines[0] = lines[0] + "; symbols it would provide could not be checked"
    return CheckResult("symbols", "fail", "\n".join(lines))


# -- CUDA runtime ----------------------------------------------------------------------------
def cudart_major(needed: Iterable[str]) -> int | None:
    """The major of a ``libcudart.so.N`` among ``needed`` sonames, or None."""
    for soname in needed:
        m = re.fullmatch(r"libcudart\.so\.(\d+)(?:\.\d+)*", soname)
        if m:
            return int(m[1])
    return None


def _static_cudart(lib: ElfLib) -> bool:
    # nvcc links libcudart_static by default; its registration entry points are then local
    # symbols (visible only when not stripped), and the .so still carries a fatbin.
    if lib.section_data(".nv_fatbin") is not None:
        return True
    return any(s.name == "__cudaRegisterFatBinary" and s.defined
               for s in lib.static_symbols() + lib.dynamic_symbols())


def check_cudart(so: Path, torch_cuda: str) -> CheckResult:
    """Compare the CUDA runtime ``so`` links with torch's CUDA (``"13.0"``; ``""`` = CPU torch)."""
    torch_major = int(torch_cuda.split(".")[0]) if torch_cuda else None
    with ElfLib(so) as lib:
        major = cudart_major(lib.needed)
        static = major is None and _static_cudart(lib)
    torch_desc = f"torch's CUDA {torch_cuda}" if torch_cuda else "a CPU-only torch"
    if major is not None:
        if torch_major == major:
            return CheckResult("cudart", "pass", f"links libcudart.so.{major}, like {torch_desc}")
        return CheckResult("cudart", "fail",
                           f"links libcudart.so.{major} but runs with {torch_desc}: two CUDA "
                           "runtimes in one process\nfix: build against the combo's torch and "
                           "its CUDA toolkit")
    if static:
        return CheckResult("cudart", "pass",
                           f"CUDA runtime linked statically (its version is not recorded in the "
                           f"binary); {torch_desc}")
    return CheckResult("cudart", "pass", "does not use the CUDA runtime")
