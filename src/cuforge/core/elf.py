"""Reading ELF shared objects with pyelftools: dynamic symbols, DT_NEEDED, RUNPATH/RPATH,
the symbol versions a file needs (``.gnu.version_r``: ``pthread_join@GLIBC_2.34`` from
``libc.so.6``), symbol lookup through the GNU/SysV hash tables, and batch demangling with
``c++filt``.

Nothing here imports torch or runs the interpreter: checks 1-3 only read files.

>>> demangle(["_Z3fooi", "plain_c"])["_Z3fooi"] in ("foo(int)", "_Z3fooi")
True
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
from elftools.elf.sections import Section, SymbolTableSection

ELF_MAGIC = b"\x7fELF"


def is_elf(path: Path) -> bool:
    """True when ``path`` is a regular file starting with the ELF magic."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return False


def shared_objects(root: Path) -> list[Path]:
    """Every ELF ``*.so`` / ``*.so.N`` file under ``root``, sorted (symlinks skipped)."""
    found = []
    for path in sorted(root.rglob("*")):
        name = path.name
        if path.is_symlink() or not path.is_file():
            continue
        if (name.endswith(".so") or ".so." in name) and is_elf(path):
            found.append(path)
    return found


@dataclass(frozen=True)
class Symbol:
    """A dynamic symbol: ``defined`` False means the loader must find it elsewhere."""

    name: str
    defined: bool
    weak: bool


@dataclass(frozen=True)
class VersionNeed:
    """One symbol version a file asks the loader for: ``GLIBC_2.34`` from ``libc.so.6``, and
    the undefined symbols bound to it (none for a version needed only as a whole)."""

    library: str
    version: str
    symbols: tuple[str, ...]


class ElfLib:
    """One opened shared object. Use as a context manager (it keeps the file open so that
    hash-table lookups in 400 MB torch libraries read only the few bytes they need).

    >>> import sys
    >>> with ElfLib(Path(os.path.realpath(sys.executable))) as exe:
    ...     isinstance(exe.needed, tuple)
    True
    """

    def __init__(self, path: Path, data: bytes | None = None) -> None:
        """``data``: the file's bytes (a wheel member read from the zip); ``path`` then only
        names it."""
        self.path = path
        self._file: BinaryIO = io.BytesIO(data) if data is not None else open(path, "rb")
        try:
            self.elf = ELFFile(self._file)
        except ELFError as err:
            self._file.close()
            raise ValueError(f"{path} is not a readable ELF file: {err}") from None

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ElfLib:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- dynamic section -------------------------------------------------------------------
    @cached_property
    def _dynamic_tags(self) -> list[tuple[str, str]]:
        dyn = self.elf.get_section_by_name(".dynamic")
        if not isinstance(dyn, DynamicSection):
            return []
        out = []
        for tag in dyn.iter_tags():
            if tag.entry.d_tag in ("DT_NEEDED", "DT_RUNPATH", "DT_RPATH", "DT_SONAME"):
                value = getattr(tag, tag.entry.d_tag.removeprefix("DT_").lower(), "")
                out.append((tag.entry.d_tag, value))
        return out

    @property
    def needed(self) -> tuple[str, ...]:
        """DT_NEEDED sonames, in load order."""
        return tuple(v for t, v in self._dynamic_tags if t == "DT_NEEDED")

    @property
    def soname(self) -> str | None:
        return next((v for t, v in self._dynamic_tags if t == "DT_SONAME"), None)

    def search_dirs(self) -> list[Path]:
        """RUNPATH (or RPATH when there is no RUNPATH) with ``$ORIGIN`` expanded."""
        runpath = [v for t, v in self._dynamic_tags if t == "DT_RUNPATH"]
        entries = runpath or [v for t, v in self._dynamic_tags if t == "DT_RPATH"]
        origin = str(self.path.parent)
        dirs = []
        for entry in entries:
            for part in entry.split(":"):
                if part:
                    part = part.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
                    dirs.append(Path(os.path.normpath(part)))
        return dirs

    # -- symbols ---------------------------------------------------------------------------
    def _symtab(self, name: str) -> SymbolTableSection | None:
        sec = self.elf.get_section_by_name(name)
        return sec if isinstance(sec, SymbolTableSection) else None

    def dynamic_symbols(self) -> list[Symbol]:
        """Global and weak symbols of ``.dynsym`` (the ones the loader sees)."""
        return list(_symbols(self._symtab(".dynsym")))

    def static_symbols(self) -> list[Symbol]:
        """Symbols of ``.symtab`` (empty when the file is stripped), locals included."""
        return list(_symbols(self._symtab(".symtab"), locals_too=True))

    def undefined(self) -> list[str]:
        """Names the loader must resolve elsewhere: undefined, not weak (weak may stay 0)."""
        return sorted({s.name for s in self.dynamic_symbols() if not s.defined and not s.weak})

    @cached_property
    def _hash(self) -> Section | None:
        # Prefer the GNU hash table: O(1) lookups instead of reading 75,000 torch symbols.
        return self.elf.get_section_by_name(".gnu.hash") or self.elf.get_section_by_name(".hash")

    @cached_property
    def _defined_names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.dynamic_symbols() if s.defined)

    def defines(self, name: str) -> bool:
        """True when this library exports ``name`` (defined in ``.dynsym``)."""
        table = self._hash
        if table is not None and hasattr(table, "get_symbol"):
            sym = table.get_symbol(name)
            return sym is not None and sym["st_shndx"] != "SHN_UNDEF"
        return name in self._defined_names

    def version_needs(self) -> list[VersionNeed]:
        """Every symbol version this file needs (``.gnu.version_r``), each with the library
        that must define it and the undefined dynamic symbols bound to it, in the file's
        order. Empty for a file without symbol versioning."""
        needs_sec = next((s for s in self.elf.iter_sections()
                          if isinstance(s, GNUVerNeedSection)), None)
        if needs_sec is None:
            return []
        index: dict[int, tuple[str, str]] = {}
        for verneed, auxes in needs_sec.iter_versions():
            for aux in auxes:
                index[aux["vna_other"]] = (verneed.name, aux.name)
        bound: dict[int, list[str]] = {i: [] for i in index}
        versym = next((s for s in self.elf.iter_sections()
                       if isinstance(s, GNUVerSymSection)), None)
        dynsym = self._symtab(".dynsym")
        if versym is not None and dynsym is not None:
            for number, sym in enumerate(dynsym.iter_symbols()):
                if sym["st_shndx"] != "SHN_UNDEF" or not sym.name:
                    continue
                ndx = versym.get_symbol(number)["ndx"]
                ndx = ndx if isinstance(ndx, int) else -1   # VER_NDX_LOCAL / GLOBAL
                if ndx & 0x7FFF in bound:   # the top bit only hides the symbol
                    bound[ndx & 0x7FFF].append(sym.name)
        return [VersionNeed(lib, version, tuple(sorted(bound[i])))
                for i, (lib, version) in index.items()]

    def section_data(self, name: str) -> bytes | None:
        """The bytes of section ``name`` (e.g. ``.nv_fatbin``), or None when absent."""
        sec = self.elf.get_section_by_name(name)
        return None if sec is None else sec.data()


def _symbols(table: SymbolTableSection | None, *, locals_too: bool = False) -> Iterable[Symbol]:
    if table is None:
        return
    for sym in table.iter_symbols():
        bind = sym["st_info"]["bind"]
        if not sym.name or (bind == "STB_LOCAL" and not locals_too):
            continue
        yield Symbol(sym.name, sym["st_shndx"] != "SHN_UNDEF", bind == "STB_WEAK")


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Map mangled C++ names to readable ones with one ``c++filt`` call; a name stays as is
    when ``c++filt`` is missing or fails (C names pass through unchanged anyway).

    """
    names = list(dict.fromkeys(names))
    tool = shutil.which("c++filt")
    if not names or tool is None:
        return {n: n for n in names}
    try:
        proc = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True,
                              text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in names}
    out = proc.stdout.splitlines()
    if len(out) != len(names):
        return {n: n for n in names}
    return dict(zip(names, out))
