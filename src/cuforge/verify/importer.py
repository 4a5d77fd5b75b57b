"""Check 4: does the wheel import? In a fresh interpreter (the combo's python), with the
unpacked wheel first on ``sys.path``: ``import torch`` (extensions need its libraries loaded),
then each module. A crash (segfault in a static initializer, as spconv's
``get_all_algo_desp()`` does) is reported as such, not mistaken for a traceback. At the same
time the modules are imported in a second interpreter without torch and without
``LD_LIBRARY_PATH``, judged once the first passed: what a user who imports the package first
sees (cumm's core_cc needs libnvrtc, which only torch loads).

>>> "import torch" in _script(["a", "b.c"], import_torch=False)
False
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cuforge.verify._proc import ProcessResult, describe_exit, last_error_line, run_python
from cuforge.verify.report import CheckResult, CheckStatus

MARK = "cuforge-import:"  # printed before each import: tells which one crashed or hung


# How a script imports one of a recipe's ``modules``. A dotted name is a normal import. A path
# ("Swin3D/sparse_dl/knn_cuda") is that extension file loaded on its own, its package's
# __init__ not run: for packages whose top level needs something outside the stack (Swin3D's
# imports MinkowskiEngine).
LOAD_MODULE = """
import glob, importlib, importlib.machinery, importlib.util, os, sys
def load_module(name):
    if "/" not in name:
        return importlib.import_module(name)
    for base in sys.path:
        found = sorted(glob.glob(os.path.join(base or ".", name + ".*.so")))
        if found:
            loader = importlib.machinery.ExtensionFileLoader(name.replace("/", "."), found[0])
            module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
            loader.exec_module(module)
            return module
    raise ImportError("no extension file " + name + ".*.so on sys.path")
"""


def _script(modules: Sequence[str], *, import_torch: bool) -> str:
    lines = [LOAD_MODULE]
    if import_torch:
        lines.append(f"print({MARK + ' torch'!r}, flush=True); import torch")
    lines.append(f"for name in {list(modules)!r}:")
    lines.append(f"    print({MARK!r}, name, flush=True)")
    lines.append("    load_module(name)")
    lines.append(f"print({MARK!r}, 'done', flush=True)")
    return "\n".join(lines)


def _last_started(stdout: str) -> str:
    marks = [ln.split(MARK, 1)[1].strip() for ln in stdout.splitlines() if MARK in ln]
    return marks[-1] if marks else "?"


def interpret(outcome: ProcessResult, *, timeout: float, check: str = "import") -> CheckResult:
    """Turn an import subprocess outcome into a result (shared with the smoke check's probe)."""
    where = _last_started(outcome.stdout)
    if outcome.timed_out:
        return CheckResult(check, "fail", f"timed out after {timeout:g} s while importing {where}")
    if outcome.crashed:
        tail = "\n".join(outcome.stderr.strip().splitlines()[-15:])
        return CheckResult(check, "fail",
                           f"{describe_exit(outcome.returncode)} while importing {where}\n{tail}")
    if outcome.returncode != 0:
        return CheckResult(check, "fail",
                           f"import {where} failed: {last_error_line(outcome.stderr)}\n"
                           f"{outcome.stderr.strip()[-2000:]}")
    return CheckResult(check, "pass", "")


def check_import(python: Path, paths: Sequence[Path], modules: Sequence[str], *,
                 import_torch: bool = True, timeout: float = 300,
                 env: Mapping[str, str] | None = None) -> CheckResult:
    """Import ``modules`` (after torch) in a subprocess of ``python`` with ``paths`` first on
    ``sys.path``. Fails on a traceback (its last line is the summary), a signal
    ("crashed with SIGSEGV while importing pkg._C") or a timeout."""
    if not modules:
        return CheckResult("import", "skipped", "skipped: the wheel has no importable module")
    if not import_torch:
        outcome = run_python(python, ["-c", _script(modules, import_torch=False)], paths=paths,
                             timeout=timeout, env=env)
        result = interpret(outcome, timeout=timeout)
        return CheckResult("import", "pass", f"imported {', '.join(modules)}") \
            if result.status is CheckStatus.PASS else result
    # Both imports at once: each is an interpreter loading torch or the wheel's libraries
    # (seconds for spconv), and the second only matters once the first passed.
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(_import, python, paths, modules, with_torch=True, timeout=timeout,
                            env=env)
        alone = pool.submit(_import, python, paths, modules, with_torch=False, timeout=timeout,
                            env=env)
        result = interpret(first.result(), timeout=timeout)
        if result.status is not CheckStatus.PASS:
            return result
        return _without_torch(alone.result(), modules, timeout=timeout)


def _import(python: Path, paths: Sequence[Path], modules: Sequence[str], *, with_torch: bool,
            timeout: float, env: Mapping[str, str] | None = None) -> ProcessResult:
    """One import run. Without torch, also without LD_LIBRARY_PATH: as in a fresh venv."""
    return run_python(python, ["-c", _script(modules, import_torch=with_torch)], paths=paths,
                      timeout=timeout, plain_loader=not with_torch, env=env)


# Sonames torch's own libraries carry: a torch extension needs `import torch` first by design.
_TORCH_LIBS = re.compile(r"^lib(c10|torch|shm)[\w.-]*\.so")
_MISSING = re.compile(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file")


def _without_torch(outcome: ProcessResult, modules: Sequence[str], *,
                   timeout: float) -> CheckResult:
    """The verdict on the import without torch (and without LD_LIBRARY_PATH), as a user who
    imports this package first would see it: torch preloads CUDA libraries (libnvrtc, cuBLAS,
    ...) that a module may need but cannot find by itself. Says which, instead of passing
    silently."""
    done = f"imported torch, then {', '.join(modules)}"
    alone = interpret(outcome, timeout=timeout)
    if alone.status is CheckStatus.PASS:
        return CheckResult("import", "pass", f"{done}; also without torch imported first")
    missing = _MISSING.search(outcome.stderr)
    where = _last_started(outcome.stdout)
    if outcome.crashed or outcome.timed_out:
        return CheckResult("import", "fail", f"{done}, but without torch imported first: "
                           f"{alone.detail}")
    if missing and _TORCH_LIBS.match(missing[1]):
        return CheckResult("import", "pass", f"{done}; {where} needs torch imported first "
                           f"({missing[1]}), as torch extensions do")
    if not missing:   # not the loader: the package simply expects torch (its own choice)
        return CheckResult("import", "pass", f"{done}; without torch imported first, {where} "
                           f"fails: {last_error_line(outcome.stderr)}")
    return CheckResult("import", "warn",
                       f"{done}; resolves only after `import torch`: without it, importing "
                       f"{where} fails ({missing[1]} does not resolve; torch or the "
                       "environment loaded it, the module cannot find it by itself)")
