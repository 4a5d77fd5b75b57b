"""Verify built (or downloaded) wheels against the combo they are meant for.

Per ``.so`` in the wheel: C++ ABI (``abi``), symbol resolution (``symbols``), CUDA runtime
major (``cudart``) and fatbin arch coverage (``fatbin``); over all its ELF files, the C library
it needs held to the combo's ceiling (``glibc``) — all by reading ELF files, no torch needed;
then, with the combo's interpreter: ``import`` and the recipe's ``smoke`` script.

Typical use (``cuforge verify``: ``cuforge.pipeline.verify_command``)::

    ctx = context_from(probe(python), parse_arch_list("9.0"))   # cuforge.env.torchinfo.probe
    reports = [verify_wheel(w, ctx, smoke=recipe_smoke) for w in wheels]
    console.print(render_table(reports))      # or print(reports_to_json(reports))
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cuforge.core import faults
from cuforge.config.arches import ArchList
from cuforge.env.torchinfo import TorchInfo
from cuforge.verify.abi import check_abi
from cuforge.core.elf import shared_objects
from cuforge.verify.fatbin import FatbinContainer, check_fatbin, read_fatbin
from cuforge.verify.floor import Ceiling, floor_of_tree, torch_ceiling, version
from cuforge.verify.glibc import check_glibc
from cuforge.verify.importer import check_import
from cuforge.verify.checklist import CHECKS, CheckStatus
from cuforge.verify.report import (CheckResult, VerifyContext, WheelReport, merge, render_table,
                                   reports_to_json)
from cuforge.verify.smoke import SmokeScript, check_smoke
from cuforge.verify.symbols import LibrarySet, check_cudart, check_symbols
from cuforge.verify.wheel import default_modules, import_roots, package_name, unpack, wheel_lib_dirs

__all__ = [
    "CHECKS", "CheckResult", "CheckStatus", "SmokeScript", "VerifyContext", "WheelReport", "context_from",
    "render_table", "reports_to_json", "verify_wheel",
]


def context_from(info: TorchInfo, requested: ArchList | None = None,
                 env: tuple[tuple[str, str], ...] = (), *, no_device: str = "",
                 sysroot: Path | None = None, glibc_floor: str = "",
                 combo: str = "") -> VerifyContext:
    """The checks' view of an interpreter already probed by ``cuforge.env.torchinfo.probe``: the
    build pipeline passes the combo env's info, so verification asks nothing twice.
    ``glibc_floor``: the combo's (``combo`` names it); without one, the ceiling is the floor
    torch's own wheel tag promises (read from its dist-info in the env)."""
    lib_dirs = (info.torch_lib, *info.nvidia_lib) if info.torch_lib else info.nvidia_lib
    ceiling = (Ceiling(version(glibc_floor), f"{combo or 'the combo'}'s glibc_floor",
                       declared=True) if glibc_floor else torch_ceiling(info.site_packages))
    return VerifyContext(python=info.python, torch_version=info.torch, torch_cuda=info.cuda,
                         cxx11_abi=info.cxx11_abi, lib_dirs=tuple(lib_dirs), requested=requested,
                         env=env, no_device=no_device, sysroot=str(sysroot or ""),
                         ceiling=ceiling)


def _per_so(check: str, sos: list[Path], root: Path, run) -> CheckResult:
    per_file = [(str(so.relative_to(root)), run(so)) for so in sos]
    return merge(check, per_file, empty="no shared objects (pure Python wheel)")


def _elf_checks(root: Path, sos: list[Path], ctx: VerifyContext,
                wheel: Path) -> list[CheckResult]:
    """The checks that read ELF files only (the per-``.so`` ones, then the wheel's floor)."""
    dirs = (*ctx.lib_dirs, *wheel_lib_dirs(sos))
    with LibrarySet(dirs, sysroot=ctx.sysroot) as libs:
        results = [
            _per_so("abi", sos, root, lambda so: check_abi(so, ctx.cxx11_abi)),
            _per_so("symbols", sos, root, lambda so: check_symbols(so, libs, python=ctx.python)),
            _per_so("cudart", sos, root, lambda so: check_cudart(so, ctx.torch_cuda)),
            _per_so("fatbin", sos, root, lambda so: check_fatbin(so, ctx.requested)),
        ]
    results.append(check_glibc(floor_of_tree(root), ctx.ceiling, platform_tags(wheel)))
    return results


def platform_tags(wheel: Path) -> list[str]:
    """The platform tags of a wheel's file name (none for a name that is not a wheel's).

    >>> platform_tags(Path("a-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"))
    ['manylinux2014_x86_64', 'manylinux_2_17_x86_64']
    """
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    try:
        return sorted({t.platform for t in parse_wheel_filename(wheel.name)[3]})
    except InvalidWheelFilename:
        return []


def _fatbins(root: Path, sos: list[Path]) -> dict[str, list[FatbinContainer]]:
    out = {}
    for so in sos:
        try:
            containers = read_fatbin(so)
        except ValueError:
            continue  # the fatbin check already failed on it
        if containers:
            out[str(so.relative_to(root))] = containers
    return out


def verify_wheel(wheel: Path, ctx: VerifyContext, *, smoke: SmokeScript | Path | None = None,
                 modules: list[str] | None = None, timeout: float = 300,
                 dependency_paths: Sequence[Path] = (),
                 no_smoke: str = "no smoke script in the recipe") -> WheelReport:
    """Run every check on ``wheel`` and return its report (checks in ``CHECKS`` order).

    ``modules``: what the import check imports (default: the wheel's top-level names and all
    its extension modules). ``smoke``: the recipe's smoke script, a path or a SmokeScript that
    also says whether it needs a GPU (None: smoke is skipped, and ``no_smoke`` says why).
    ``timeout``: seconds for each subprocess. ``dependency_paths``: import roots of the wheels
    this one needs at run time (spconv imports cumm), placed after the wheel's own roots.
    Raises VerifyError only when the file is not a wheel; every finding is a CheckResult.
    """
    wheel = Path(wheel)
    smoke = SmokeScript(Path(smoke)) if isinstance(smoke, (str, Path)) else smoke
    with tempfile.TemporaryDirectory(prefix="cuforge-verify-") as tmp, \
            ThreadPoolExecutor(max_workers=2) as pool:
        root = unpack(wheel, Path(tmp))
        sos = shared_objects(root)
        paths = import_roots(root) + list(dependency_paths)
        faults.point("verify")   # tests: die with the wheel built but not yet verified
        # The import check and the GPU probe + smoke start first, side by side, and the ELF
        # reading runs while they load torch: one after another, they took seconds each of
        # every spconv build. A smoke beside an import that fails is run for nothing; its
        # result is then not reported (the report fails already).
        importing = pool.submit(check_import, ctx.python, paths,
                                modules or default_modules(root), timeout=timeout,
                                env=dict(ctx.env))
        fatbins = _fatbins(root, sos)
        smoking = pool.submit(check_smoke, ctx.python, smoke, paths, fatbins=fatbins,
                              timeout=timeout, env=dict(ctx.env), no_device=ctx.no_device) \
            if smoke is not None else None
        results = _elf_checks(root, sos, ctx, wheel)
        imported = importing.result()
        results.append(imported)
        if smoking is None:
            results.append(CheckResult("smoke", CheckStatus.SKIPPED, f"skipped: {no_smoke}"))
        elif imported.failed:
            results.append(CheckResult("smoke", CheckStatus.SKIPPED,
                                       "skipped: the wheel does not import"))
        else:
            results.append(smoking.result())
    return WheelReport(wheel, package_name(wheel), results, embedded_arches(fatbins))


def embedded_arches(fatbins: dict[str, list[FatbinContainer]]) -> dict[str, list[str]]:
    """SASS and PTX arch numbers embedded in a wheel's ``.so`` files (what is really there,
    not what was requested), from their fatbin containers.

    >>> from cuforge.config.arches import Arch
    >>> from cuforge.verify.fatbin import FatbinEntry
    >>> c = FatbinContainer(0, 0, (FatbinEntry("sass", Arch(9, 0), (1, 8), 0, 0, False, ()),))
    >>> embedded_arches({"lib.so": [c]})
    {'sass': ['90'], 'ptx': []}
    """
    containers = [c for found in fatbins.values() for c in found]
    sass = sorted({a for c in containers for a in c.sass})
    ptx = sorted({a for c in containers for a in c.ptx})
    return {"sass": [a.number for a in sass], "ptx": [a.number for a in ptx]}


