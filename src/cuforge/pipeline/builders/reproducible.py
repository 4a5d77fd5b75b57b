"""The same sources give the same compiled bytes from any directory (docs/reliability.md,
"Reproducible wheels"). A build's own paths (the package's work dir, the combo env's
site-packages, the toolkit root, the project) are mapped to fixed names under ``/cuforge`` in
whatever a compiler writes, by two launcher scripts in front of every compile:

- C and C++: ``-ffile-prefix-map=OLD=NEW`` per path (``__FILE__`` in torch's TORCH_CHECK, debug
  info);
- nvcc: the same for its host compiler (``-Xcompiler=``, which reaches the device side's
  preprocessing too), ``-objtemp`` (its intermediate files named after the object, not
  ``tmpxft_<pid>_...``: an unstripped object's symbol table keeps that name; behind sccache,
  which names them ``x_0.*`` itself and loses the object with ``-objtemp``, it is left out),
  and
  ``-Xcudafe --orig_src_path_name=<the source, mapped>``: cudafe++ derives the module id from
  the source's absolute path, and the id is part of every name in an anonymous namespace
  (``_GLOBAL__N__8374a026_10_kernels_cu_...``, kernels included). The id must differ per
  source file, so this flag is made per compile, which a CMake or torch flag list cannot do.

The scripts sit in front of the compiler cache (``BuildJob.launchers``): sccache hashes the
command line with these flags on it, so nothing that changes the output travels in a variable a
cache does not read (``NVCC_APPEND_FLAGS``).
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from pathlib import Path

from cuforge.pipeline.sources import epoch_file

ROOT = "/cuforge"
_UNSAFE = set(",= \t\n")   # what no map's path may hold (path_maps)
CUDA = "CUDA"   # CMake's language names: C, CXX, CUDA
# what nvcc compiles (the last such argument is the source; options never end so)
SOURCES = "*.cu|*.cpp|*.cc|*.cxx|*.c"


@dataclass(frozen=True)
class PathMaps:
    """The paths a build maps, where its launcher scripts go, and the file its source's time
    is read from (``SOURCE_DATE_EPOCH``, written by the fetch: ``sources.epoch_file``)."""

    maps: tuple[tuple[str, str], ...]   # (old, new); gcc takes the last match: most specific last
    where: Path                         # the launcher scripts' directory
    epoch_file: Path | None = None

    def flags(self) -> list[str]:
        """The host compiler's flags.

        >>> PathMaps((("/w", "/cuforge/p"),), Path("/l")).flags()
        ['-ffile-prefix-map=/w=/cuforge/p']
        """
        return [f"-ffile-prefix-map={old}={new}" for old, new in self.maps]

    def launcher(self, lang: str) -> tuple[Path, str]:
        """The launcher script of ``lang``'s compiler: (path, text), named by its text."""
        text = self._nvcc_text() if lang == CUDA else self._cxx_text()
        kind = "nvcc" if lang == CUDA else "cxx"
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        return self.where / f"mapped-{kind}-{digest}", text

    def scripts(self) -> tuple[tuple[Path, str], ...]:
        return (self.launcher("CXX"), self.launcher(CUDA))

    def _cxx_text(self) -> str:
        return ("#!/bin/sh\n# cuforge: the compile behind this with the build's paths mapped "
                "(builders/reproducible.py)\n"
                f'exec "$@" {shlex.join(self.flags())}\n')

    def _nvcc_text(self) -> str:
        host_flags = shlex.join(f"-Xcompiler={flag}" for flag in self.flags())
        cases = "".join(f"  {shlex.quote(old)}/*) src={shlex.quote(new)}/${{src#{shlex.quote(old)}/}} ;;\n"
                        for old, new in reversed(self.maps))   # most specific first
        return ("#!/bin/sh\n# cuforge: nvcc behind this with the build's paths mapped, its "
                "module id from the mapped source path (builders/reproducible.py)\n"
                "src=\n"
                'for arg in "$@"; do\n'
                f"  case $arg in -*) ;; {SOURCES}) src=$arg ;; esac\n"
                "done\n"
                "# sccache runs nvcc's steps itself, its files named x_0.*; with -objtemp it\n"
                "# loses the object (0.16: exit 0, no file)\n"
                'temps=-objtemp\n'
                'case ${1##*/} in sccache) temps= ;; esac\n'
                f'case $src in \'\') exec "$@" {host_flags} $temps ;; /*) ;; *) src=$(pwd -P)/$src ;; esac\n'
                f"case $src in\n{cases}esac\n"
                f'exec "$@" {host_flags} $temps -Xcudafe "--orig_src_path_name=$src"\n')


def path_maps(work: Path, name: str, *, project: Path, site_packages: Path | None,
              toolkit: Path | None) -> PathMaps:
    """The maps of package ``name`` built in ``work`` (its tree fetched into ``work/src``): its
    tree and build dir, the env's site-packages (torch's and pybind11's headers), the toolkit
    root, the project (native/).
    A path a flag cannot carry is left as it is: nvcc splits -Xcompiler's value at a comma
    and passes it on split at spaces too, and ``=`` ends a map's old path.

    >>> m = path_maps(Path("/p/.cuforge/work/e/demo"), "demo", project=Path("/p"),
    ...               site_packages=None, toolkit=Path("/p/.cuforge/envs/e/cuda"))
    >>> m.maps
    (('/p', '/cuforge/project'), ('/p/.cuforge/envs/e/cuda', '/cuforge/cuda'), ('/p/.cuforge/work/e/demo', '/cuforge/demo'))
    """
    pairs = {str(project): f"{ROOT}/project", str(work): f"{ROOT}/{name}"}
    if site_packages is not None:
        pairs[str(site_packages)] = f"{ROOT}/site-packages"
    if toolkit is not None:
        pairs[str(toolkit)] = f"{ROOT}/cuda"
    kept = sorted(((old, new) for old, new in pairs.items()
                   if old != "/" and not _UNSAFE & set(old)), key=lambda m: (len(m[0]), m[0]))
    return PathMaps(tuple(kept), work / "launchers", epoch_file(work / "src"))
