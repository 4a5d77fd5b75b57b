"""The host C++ compiler a build uses, checked before anything is compiled with it.

A compiler that links libstdc++ *statically* into shared objects (seen on the lent H200: its
environment's ``CXX`` is a wrapper g++ whose link spec adds ``-static-libstdc++`` and
``-Bsymbolic``) gives every extension module a private copy of the standard library and its
type info. Modules that pass C++ objects between them (cumm's and spconv's ``core_cc``) then
disagree about them. The probe builds a three-line shared object and reads it: a dynamic
libstdc++ shows as a ``libstdc++.so.N`` NEEDED entry and no ``std::`` definitions.

>>> is_std_symbol("std::__cxx11::basic_ostringstream<char>::~basic_ostringstream()")
True
>>> is_std_symbol("typeinfo for std::exception"), is_std_symbol("probe_text()")
(True, False)
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cuforge.core.errors import ToolchainError
from cuforge.core.elf import ElfLib, demangle

# Needs the library for real: a stream's vtables and locale machinery live in libstdc++.
PROBE_SOURCE = """\
#include <sstream>
#include <string>
std::string probe_text(int n) { std::ostringstream s; s << "n=" << n; return s.str(); }
"""

_STD = re.compile(r"^(?:(?:typeinfo name|typeinfo|vtable|VTT|guard variable) for )?std::")


def is_std_symbol(demangled: str) -> bool:
    return bool(_STD.match(demangled))


@dataclass(frozen=True)
class HostCompiler:
    """A probed host compiler: ``cxx`` (C++), ``cc`` (its C sibling), what the probe saw."""

    cxx: str
    cc: str
    needed: tuple[str, ...]
    std_defined: int

    @property
    def static_libstdcxx(self) -> bool:
        return self.std_defined > 0 and not any(n.startswith("libstdc++.so") for n in self.needed)

    def describe(self) -> str:
        if self.static_libstdcxx:
            return (f"{self.cxx} links libstdc++ statically into shared objects "
                    f"({self.std_defined} std:: symbols defined, no libstdc++.so NEEDED)")
        lib = next((n for n in self.needed if n.startswith("libstdc++")), "no libstdc++")
        return f"{self.cxx}: {lib} (dynamic)"

    def environment(self) -> dict[str, str]:
        """What makes every build front-end use this compiler: setuptools and ccimport read
        CC/CXX, CMake CXX/CUDAHOSTCXX, torch passes ``-ccbin $CC`` to nvcc on the command line
        (so a compiler cache hashes it); ``NVCC_CCBIN`` covers nvcc calls without ``-ccbin``
        (cumm's). NVCC_APPEND_FLAGS stays free of it: ccache does not hash that variable."""
        bare = shlex.split(self.cxx)[-1]    # nvcc's -ccbin takes a compiler, not a launcher
        return {"CC": self.cc, "CXX": self.cxx, "CUDAHOSTCXX": bare, "NVCC_CCBIN": bare}


def c_sibling(cxx: str) -> str:
    """The C compiler next to a C++ one.

    >>> c_sibling("/usr/bin/g++-12"), c_sibling("clang++"), c_sibling("/opt/x/c++")
    ('/usr/bin/gcc-12', 'clang', '/opt/x/cc')
    """
    head, name = os.path.split(cxx)
    for plus, plain in (("clang++", "clang"), ("g++", "gcc"), ("c++", "cc")):
        if plus in name:
            return os.path.join(head, plain.join(name.rsplit(plus, 1)))
    return cxx


def probe(cxx: str, cc: str | None = None, search: str | None = None) -> HostCompiler:
    """Compile and link the probe with ``cxx`` and read the result (about a second);
    ``search``: the PATH ``cxx`` is looked up in (default: this process's)."""
    words = shlex.split(cxx)            # CXX may carry a launcher: "ccache g++"
    path = shutil.which(words[0], path=search) if words else None
    if path is None:
        raise ToolchainError(f"host C++ compiler {cxx!r} not found",
                             hint="install g++ (apt-get install g++), or name one with "
                             "host_cxx = \"/usr/bin/g++\" in the combo (envs/combos.toml)")
    command = shlex.join([path, *words[1:]])
    stat = os.stat(path)
    return _probe(command, cc or c_sibling(command), stat.st_mtime_ns, stat.st_size)


@cache
def _probe(cxx: str, cc: str, _mtime: int, _size: int) -> HostCompiler:
    with tempfile.TemporaryDirectory(prefix="cuforge-hostcxx-") as tmp:
        src, out = Path(tmp) / "probe.cpp", Path(tmp) / "libprobe.so"
        src.write_text(PROBE_SOURCE)
        proc = subprocess.run([*shlex.split(cxx), "-shared", "-fPIC", "-O1", str(src), "-o",
                               str(out)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise ToolchainError(f"host C++ compiler {cxx} cannot build a shared object:\n"
                                 f"{proc.stderr.strip()[-1500:]}",
                                 hint="fix the compiler, or name another with host_cxx = "
                                 "\"/usr/bin/g++\" in the combo (envs/combos.toml)")
        with ElfLib(out) as lib:
            needed = lib.needed
            defined = [s.name for s in lib.dynamic_symbols() if s.defined]
    names = demangle(defined).values()
    return HostCompiler(cxx, cc, needed, sum(map(is_std_symbol, names)))


def choose(host_cxx: str = "", host_cc: str = "", fallbacks: tuple[str, ...] = (),
           search: str | None = None) -> tuple[HostCompiler, str]:
    """The host compiler to build with, and a note when it is not the environment's own.

    ``host_cxx`` (the combo's key) must pass the probe. Otherwise the environment's ``CXX``
    (else ``g++``) is probed; when it links libstdc++ statically, the first of ``fallbacks``
    that does not is taken. Raises ToolchainError when none qualifies. ``search``: the PATH
    the builds will have (under emulation the sysroot compiler wrappers come first).
    """
    fix = ("set host_cxx = \"/usr/bin/g++\" (any g++ that links libstdc++.so dynamically) in "
           "this combo in envs/combos.toml")
    if host_cxx:
        chosen = probe(host_cxx, host_cc or None, search)
        if chosen.static_libstdcxx:
            raise ToolchainError(f"the combo's host_cxx: {chosen.describe()}; extension modules "
                                 "would each carry a private C++ standard library", hint=fix)
        return chosen, ""
    default = os.environ.get("CXX") or "g++"
    first = probe(default, os.environ.get("CC") or None, search)
    if not first.static_libstdcxx:
        return first, ""
    for candidate in fallbacks:
        if shutil.which(candidate, path=search) is None:
            continue
        other = probe(candidate, search=search)
        if not other.static_libstdcxx:
            return other, (f"{first.describe()}; building with {other.cxx} instead "
                           f"(CC={other.cc}, CXX/CUDAHOSTCXX/NVCC_CCBIN={other.cxx})")
    raise ToolchainError(f"{first.describe()}: extension modules built with it each carry a "
                         "private C++ standard library (modules that exchange C++ objects, "
                         "like cumm's and spconv's core_cc, may then disagree about them), and "
                         f"no fallback ({', '.join(fallbacks) or 'none'}) links it dynamically",
                         hint=fix)
