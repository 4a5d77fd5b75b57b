"""Check 4: does the wheel import? In a fresh interpreter (the combo's python), with the
unpacked wheel first on ``sys.path``: ``import torch`` (extensions need its libraries loaded),
then each module. A crash (segfault in a static initializer, as spconv's
``get_all_algo_desp()`` does) is reported as such, not mistaken for a traceback.

>>> _script(["a", "b.c"], import_torch=False).count("import_module")
1
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ._proc import Outcome, describe_exit, last_error_line, run_python
from .report import CheckResult

MARK = "cuforge-import:"  # printed before each import: tells which one crashed or hung


def _script(modules: Sequence[str], *, import_torch: bool) -> str:
    lines = ["import importlib, sys"]
    if import_torch:
        lines.append(f"print({MARK + ' torch'!r}, flush=True); import torch")
    lines.append(f"for name in {list(modules)!r}:")
    lines.append(f"    print({MARK!r}, name, flush=True)")
    lines.append("    importlib.import_module(name)")
    lines.append(f"print({MARK!r}, 'done', flush=True)")
    return "\n".join(lines)


def _last_started(stdout: str) -> str:
    marks = [ln.split(MARK, 1)[1].strip() for ln in stdout.splitlines() if MARK in ln]
    return marks[-1] if marks else "?"


def interpret(outcome: Outcome, *, timeout: float, check: str = "import") -> CheckResult:
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
                 import_torch: bool = True, timeout: float = 300) -> CheckResult:
    """Import ``modules`` (after torch) in a subprocess of ``python`` with ``paths`` first on
    ``sys.path``. Fails on a traceback (its last line is the summary), a signal
    ("crashed with SIGSEGV while importing pkg._C") or a timeout."""
    if not modules:
        return CheckResult("import", "skipped", "skipped: the wheel has no importable module")
    outcome = run_python(python, ["-c", _script(modules, import_torch=import_torch)],
                         paths=paths, timeout=timeout)
    result = interpret(outcome, timeout=timeout)
    if result.status == "pass":
        first = "torch, then " if import_torch else ""
        return CheckResult("import", "pass", f"imported {first}{', '.join(modules)}")
    return result
