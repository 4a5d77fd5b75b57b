"""Upstream's own test suite as a check (``upstream-tests``): run against the built wheel with
the combo's interpreter, in a clean directory where the source tree cannot shadow the wheel.

How a run is made clean:

* only the suite (the recipe's ``[upstream_tests] path``) is copied into a scratch directory,
  never the source tree around it, so ``import pkg`` cannot find the unbuilt sources (a
  ``tests/__init__.py`` makes pytest put the suite's parent on ``sys.path``: the scratch dir);
* anything in the copied suite's top level named like one of the wheel's top-level modules is
  removed (and the result says so);
* ``PYTHONSAFEPATH=1`` keeps the cwd and the script's directory off ``sys.path``; no user site;
* before the suite runs, a probe imports each top-level module from the same directory with
  the same environment and fails the check if one resolves inside the scratch directory.

The verdict: exit 0 -> pass ("<runner summary> (<seconds> s)"), 77 or pytest's
"everything skipped" -> skipped, a timeout -> fail "timed out after N s", anything else ->
fail with the runner's summary line (pytest's ``== 1 failed, 1 passed in 0.12s ==``,
unittest's ``FAILED (failures=1)``, or the last line).

>>> summary_line("..\\n==== 2770 passed, 30 skipped in 13.14s ====\\n")
'2770 passed, 30 skipped in 13.14s'
>>> summary_line("..F\\n1 failed, 1 passed in 0.05s\\n")
'1 failed, 1 passed in 0.05s'
>>> summary_line("Ran 3 tests in 0.010s\\n\\nOK\\n")
'Ran 3 tests in 0.010s: OK'
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from cuforge.config.recipes import UpstreamTests
from cuforge.verify._proc import describe_exit, last_error_line, run_python
from cuforge.verify.report import CheckResult
from cuforge.verify.requirements import unmet

CHECK = "upstream-tests"
# "== 2 passed, 1 skipped in 0.12s ==", or without the rules under -q
_PYTEST_SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+|no tests ran)(?:, \d+ \w+)* in [\d.]+s\b.*?)\s*=*$")
_UNITTEST_RAN = re.compile(r"^Ran \d+ tests? in [\d.]+s$")
_PYTEST_NO_TESTS = 5      # pytest's exit code when it collected nothing


def summary_line(stdout: str, stderr: str = "") -> str:
    """The runner's own summary: pytest's last ``== ... in Xs ==`` line, unittest's
    ``Ran N tests`` plus its verdict, else the last non-empty line of the output."""
    lines = [ln.strip() for ln in (stdout + "\n" + stderr).splitlines() if ln.strip()]
    for ln in reversed(lines):
        if m := _PYTEST_SUMMARY.match(ln):
            return m.group(1)
    for i in range(len(lines) - 1, -1, -1):
        if _UNITTEST_RAN.match(lines[i]):
            verdict = next((v for v in lines[i + 1:] if v.startswith(("OK", "FAILED"))), "")
            return f"{lines[i]}: {verdict}" if verdict else lines[i]
    return lines[-1] if lines else ""


def copy_suite(tree: Path, spec: UpstreamTests, scratch: Path,
               shadow_names: Sequence[str]) -> tuple[str, list[str]]:
    """Copy the suite out of ``tree`` into ``scratch``; return its path there (what
    ``{tests}`` becomes) and notes on what was removed because it would shadow the wheel."""
    src = tree / spec.path
    if not src.exists():
        raise FileNotFoundError(f"the suite {spec.path!r} is not in {tree}")
    dest = scratch / src.name
    if src.is_dir():
        shutil.copytree(src, dest, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    else:
        shutil.copy2(src, dest)
    notes = []
    top = dest if dest.is_dir() else scratch
    for name in shadow_names:
        for entry in (top / name, top / f"{name}.py", *top.glob(f"{name}.*.so")):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            elif entry.exists() or entry.is_symlink():
                entry.unlink()
            else:
                continue
            notes.append(f"removed {entry.relative_to(scratch)} from the copied suite: it would "
                         f"shadow the installed {name}")
    return str(dest.relative_to(scratch)), notes


_WHERE = ("import importlib, json, sys\nout = {}\nfor name in sys.argv[1:]:\n"
          "    try:\n        out[name] = getattr(importlib.import_module(name), '__file__', None) or ''\n"
          "    except Exception as err:\n        out[name] = 'error: ' + repr(err)\n"
          "print('cuforge-where:' + json.dumps(out))\n")


def shadowed(python: Path, modules: Sequence[str], paths: Sequence[Path], cwd: Path,
             env: dict[str, str]) -> list[str]:
    """The modules that, imported from ``cwd`` as the suite will be, come from inside ``cwd``."""
    if not modules:
        return []
    outcome = run_python(python, ["-c", _WHERE, *modules], paths=paths, cwd=cwd, env=env,
                         timeout=300)
    line = next((ln for ln in outcome.stdout.splitlines() if ln.startswith("cuforge-where:")), "")
    where = json.loads(line.removeprefix("cuforge-where:") or "{}")
    inside = str(cwd.resolve())
    return [f"{name} ({file})" for name, file in where.items()
            if file and not file.startswith("error") and str(Path(file).resolve()).startswith(inside)]


def install_requirements(python: Path, requires: Sequence[str], target: Path,
                         paths: Sequence[Path], env: Mapping[str, str] | None = None) -> str:
    """Make every pinned requirement importable from ``target`` (pip ``--target``, without
    dependencies: the recipe lists the closure). Returns "" or why it could not."""
    if not requires:
        return ""
    missing = unmet(python, [r.replace(" ", "") for r in requires], [*paths, target], env=env)
    if not missing:
        return ""
    target.mkdir(parents=True, exist_ok=True)
    pip = run_python(python, ["-m", "pip", "install", "--disable-pip-version-check", "-q",
                              "--no-deps", "--target", str(target), *missing], timeout=900,
                     env=env)
    if pip.returncode == 0:
        return ""
    why = last_error_line(pip.stderr) or describe_exit(pip.returncode or -9)
    if "No module named pip" in pip.stderr and (uv := _uv()):   # a uv-made env has no pip
        done = subprocess.run([uv, "pip", "install", "-q", "--python", str(python), "--no-deps",
                               "--target", str(target), *missing], capture_output=True, text=True,
                              env={**os.environ, **(env or {})})
        if done.returncode == 0:
            return ""
        why = last_error_line(done.stderr) or describe_exit(done.returncode)
    return f"could not install {' '.join(missing)}: {why}"


def _uv() -> str | None:
    from cuforge.core.errors import ToolchainError
    from cuforge.env.programs import find_uv
    try:
        return find_uv()
    except ToolchainError:
        return None


def verdict(returncode: int | None, stdout: str, stderr: str, *, seconds: float,
            timeout: float) -> CheckResult:
    """Turn how the suite ended into the check's result: the status is pass, fail or
    skipped; the detail is the runner's summary line and the time (the manifest stores
    ``"pass: 3 passed in 0.10s (1.2 s)"``).

    >>> verdict(0, "== 3 passed in 0.10s ==", "", seconds=1.234, timeout=9).detail
    '3 passed in 0.10s (1.2 s)'
    >>> verdict(None, "", "", seconds=9, timeout=9).detail
    'timed out after 9 s'
    """
    said = summary_line(stdout, stderr)
    took = f"({seconds:.1f} s)"
    if returncode is None:
        tail = last_error_line(stdout)
        return CheckResult(CHECK, "fail", f"timed out after {timeout:g} s"
                           + (f"\nlast output: {tail}" if tail else ""))
    if returncode == 0:
        if re.fullmatch(r"\d+ skipped in [\d.]+s.*", said):
            return CheckResult(CHECK, "skipped", f"skipped: {said} {took}")
        return CheckResult(CHECK, "pass", f"{said or 'exit 0'} {took}")
    if returncode == 77:
        return CheckResult(CHECK, "skipped", f"skipped: {said or 'exit 77'} {took}")
    if returncode == _PYTEST_NO_TESTS:
        return CheckResult(CHECK, "fail", f"no tests collected {took}")
    tail = "\n".join((stdout + stderr).strip().splitlines()[-30:])
    return CheckResult(CHECK, "fail", f"{said or describe_exit(returncode)} "
                       f"({describe_exit(returncode)}) {took}\n{tail}")


def run_upstream_tests(python: Path, spec: UpstreamTests, tree: Path, *,
                       paths: Sequence[Path], modules: Sequence[str], requirements_dir: Path,
                       scratch: Path, gpu_visible: bool | None,
                       env: Mapping[str, str] | None = None) -> CheckResult:
    """Run ``spec`` (found in ``tree``) against the wheel importable from ``paths``.

    ``modules``: the wheel's top-level names (shadowing is checked for them).
    ``gpu_visible``: what the device probe said (None: not asked, the suite needs no GPU).
    ``env``: what ``python`` needs on top of this process's environment (emulation's variables).
    """
    if spec.gpu and not gpu_visible:
        return CheckResult(CHECK, "skipped", "skipped: no GPU (the suite is declared gpu = true;"
                           f" torch.cuda.is_available() is False in {python})")
    why = install_requirements(python, spec.requires, requirements_dir, paths, env)
    if why:
        return CheckResult(CHECK, "skipped", f"skipped: {why}")
    paths = [*paths, requirements_dir] if spec.requires else list(paths)
    try:
        suite, notes = copy_suite(tree, spec, scratch, modules)
    except FileNotFoundError as err:
        return CheckResult(CHECK, "fail", str(err))
    env = {**(env or {}), "PYTHONSAFEPATH": "1"}
    bad = shadowed(python, modules, paths, scratch, env)
    if bad:
        return CheckResult(CHECK, "fail", "the suite's directory shadows the installed "
                           f"package: {', '.join(bad)}")
    started = time.monotonic()
    outcome = run_python(python, spec.argv(str(python), suite)[1:], paths=paths, cwd=scratch,
                         env=env, timeout=spec.timeout)
    result = verdict(outcome.returncode, outcome.stdout, outcome.stderr,
                     seconds=time.monotonic() - started, timeout=spec.timeout)
    if not notes:
        return result
    head, _, rest = result.detail.partition("\n")
    return CheckResult(CHECK, result.status, "\n".join(filter(None, [head, *notes, rest])))
