"""The stress check (``stress``): a recipe's repeated, randomized GPU workload on its wheel, and
the same workload, short, under compute-sanitizer (``--sanitize``).

One smoke run cannot see a fault that strikes once in thousands of calls (the DGX Spark
report's spconv crash). A stress script repeats the package's GPU path with every result
checked and prints, per section, calls and failures; it follows the smoke protocol (exit 0
pass, 77 skipped, anything else fail; the last line says why). n calls see a fault of per-call
rate p with probability 1 - (1 - p)^n: 29,956 calls for p = 1e-4 at 95 % (smoke/stress_spconv.py).

Under ``--sanitize`` the script's ``short_args`` run under ``compute-sanitizer --tool memcheck``
(one that can launch a program: ``find_sanitizer``; where none is found, the accel's PyPI
``nvidia-cuda-sanitizer-api>=13.4``: pipeline/stress_stage.py); the check passes only
with 0 errors:

>>> sanitizer_errors("========= ERROR SUMMARY: 0 errors\\n")
0
>>> sanitizer_errors("========= ERROR SUMMARY: 3 errors\\n")
3
>>> sanitizer_errors("no summary") is None
True
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from cuforge.config.stress import StressRule
from cuforge.core.errors import ToolchainError
from cuforge.verify._proc import describe_exit, last_error_line, run_python
from cuforge.verify.report import CheckResult, CheckStatus
from cuforge.verify.smoke import _LAUNCHER, smoke_verdict

CHECK = "stress"
SANITIZE_CHECK = "sanitize"   # the short run under compute-sanitizer: a result of its own
JIT_SUFFIX = "-ptx-jit"       # either, on the wheel's PTX (--ptx-jit): another claim, another name
SANITIZER = "compute-sanitizer"
SANITIZER_FIX = ("set CUFORGE_COMPUTE_SANITIZER to a whole compute-sanitizer: the CUDA toolkit's "
                 "(bin/compute-sanitizer), or PyPI's nvidia-cuda-sanitizer-api 13.4 or newer "
                 "(nvidia/cu13/bin/compute-sanitizer; 13.0.48 to 13.3.75 lack "
                 "TreeLauncherSubreaper and cannot launch a program)")
# compute-sanitizer starts the program through this helper beside it; PyPI's
# nvidia-cuda-sanitizer-api 13.0.48 to 13.3.75 ship the binary without it, and the run then ends
# with "couldn't find exit code" before the program starts (H100, session 23); 13.4.92 has it
LAUNCHER_HELPER = "TreeLauncherSubreaper"
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")


def check_name(*, sanitize: bool = False, ptx_jit: bool = False) -> str:
    """The check a stress run records.

    >>> check_name(), check_name(sanitize=True, ptx_jit=True)
    ('stress', 'sanitize-ptx-jit')
    """
    return (SANITIZE_CHECK if sanitize else CHECK) + (JIT_SUFFIX if ptx_jit else "")


def sanitizer_errors(output: str) -> int | None:
    """The error count of compute-sanitizer's last ``ERROR SUMMARY`` line, None without one."""
    found = _SUMMARY.findall(output)
    return int(found[-1]) if found else None


def can_launch(binary: Path) -> bool:
    """Whether this compute-sanitizer has the helper it starts programs with: beside it, or in
    the toolkit's ``compute-sanitizer/`` when ``bin/`` holds a link or wrapper to it."""
    real = Path(os.path.realpath(binary))
    return any((d / LAUNCHER_HELPER).is_file()
               for d in (real.parent, real.parent.parent / SANITIZER))


def find_sanitizer(site_dirs: Sequence[Path], toolkit_bin: Path | None = None) -> Path:
    """compute-sanitizer: ``CUFORGE_COMPUTE_SANITIZER``, else the combo env's PyPI wheel
    (``site-packages/nvidia/cu13/bin``), else the toolkit's ``bin/``, else PATH; the first
    that can launch a program (``can_launch``). One found that cannot is one clear error."""
    if named := os.environ.get("CUFORGE_COMPUTE_SANITIZER"):
        if not Path(named).is_file():
            raise ToolchainError(f"CUFORGE_COMPUTE_SANITIZER names {named}, which is not a "
                                 "file", hint=SANITIZER_FIX)
        candidates = [Path(named)]
    else:
        candidates = [d / "nvidia" / sub / "bin" / SANITIZER for d in site_dirs
                      for sub in ("cu13", "cuda_sanitizer_api")]
        if toolkit_bin is not None:
            candidates.append(toolkit_bin / SANITIZER)
        if on_path := shutil.which(SANITIZER):
            candidates.append(Path(on_path))
    found = [c for c in candidates if c.is_file()]
    for path in found:
        if can_launch(path):
            return path
    if found:
        raise ToolchainError(f"--sanitize: {found[0]} cannot launch a program: no "
                             f"{LAUNCHER_HELPER} beside it (a run ends with \"couldn't find "
                             "exit code\" before the program starts)", hint=SANITIZER_FIX)
    raise ToolchainError("--sanitize needs compute-sanitizer, and none was found (looked in "
                         f"{', '.join(str(c.parent) for c in candidates) or 'no env'} and PATH)",
                         hint=SANITIZER_FIX)


def sanitized_verdict(returncode: int | None, stdout: str, stderr: str, *, seconds: float,
                      timeout: float, check: str = SANITIZE_CHECK) -> CheckResult:
    """The check's result for a run under memcheck: the script's own verdict, and 0 errors.

    >>> sanitized_verdict(0, "pass: 40 calls\\n", "========= ERROR SUMMARY: 0 errors\\n",
    ...                   seconds=61.0, timeout=600).detail
    'passed under compute-sanitizer memcheck: 0 errors (61.0 s); 40 calls'
    >>> sanitized_verdict(99, "", "========= ERROR SUMMARY: 2 errors\\n", seconds=5, timeout=600).failed
    True
    """
    errors = sanitizer_errors(stdout + "\n" + stderr)
    if returncode is None:
        return CheckResult(check, "fail", f"timed out after {timeout:g} s under compute-sanitizer")
    if errors:
        found = [ln.strip() for ln in stderr.splitlines() + stdout.splitlines()
                 if ln.startswith("=========") and ("Invalid" in ln or "Error" in ln)][:8]
        return CheckResult(check, "fail", "\n".join([
            f"compute-sanitizer memcheck: {errors} errors ({seconds:.1f} s)", *found]))
    script = smoke_verdict(returncode if returncode != 99 else 1, stdout, stderr)
    if script.status is not CheckStatus.PASS:
        memcheck = "no ERROR SUMMARY" if errors is None else "memcheck 0 errors"
        return CheckResult(check, script.status,
                           f"{script.detail} (under compute-sanitizer: {memcheck})")
    if errors is None:
        return CheckResult(check, "fail", "compute-sanitizer printed no ERROR SUMMARY "
                           f"({describe_exit(returncode)}): {last_error_line(stderr)}")
    said = script.detail.removeprefix("passed").lstrip(": ")
    return CheckResult(check, "pass", f"passed under compute-sanitizer memcheck: 0 errors "
                       f"({seconds:.1f} s)" + (f"; {said}" if said else ""))


def run_stress(python: Path, rule: StressRule, script: Path, paths: Sequence[Path], *,
               sanitizer: Path | None = None, env: Mapping[str, str] | None = None,
               check: str | None = None) -> CheckResult:
    """Run ``script`` (full, or short under ``sanitizer``) with the wheel importable from
    ``paths``; the caller has made sure a GPU is visible."""
    check = check or check_name(sanitize=sanitizer is not None)
    if not script.is_file():
        return CheckResult(check, "fail",
                           f"stress script {script} not found")
    launch = ["-c", _LAUNCHER, str(script.resolve())]
    env = {**(env or {}), "PYTHONSAFEPATH": "1"}
    started = time.monotonic()
    if sanitizer is None:
        outcome = run_python(python, [*launch, *rule.args], paths=paths, env=env,
                             timeout=rule.timeout)
        result = smoke_verdict(outcome.returncode, outcome.stdout, outcome.stderr,
                               timeout=rule.timeout)
        took = time.monotonic() - started
        sections = [ln.strip() for ln in outcome.stdout.splitlines() if " calls, " in ln]
        head, _, rest = result.detail.partition("\n")
        return CheckResult(check, result.status,
                           "\n".join(filter(None, [f"{head} ({took:.1f} s)", *sections, rest])))
    argv = ["--tool", "memcheck", "--error-exitcode", "99", "--print-limit", "20",
            str(python), *launch, *rule.short_args]
    outcome = run_python(sanitizer, argv, paths=paths, env=env, timeout=rule.sanitize_timeout)
    return sanitized_verdict(outcome.returncode, outcome.stdout, outcome.stderr,
                             seconds=time.monotonic() - started, timeout=rule.sanitize_timeout,
                             check=check)
