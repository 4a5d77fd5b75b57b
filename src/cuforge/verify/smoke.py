"""Check 5: run a package's smoke script on the GPU.

Protocol (the script is plain Python, run by the combo's interpreter in a subprocess with the
wheel importable; its cwd is a scratch dir):

* exit 0            -> pass
* exit 77           -> skipped; the script prints the reason as its last line
                       (``skipped: needs 2 GPUs``), the automake convention
* any other exit    -> fail (the last stderr line is the summary)
* killed by signal  -> fail, "crashed with SIGSEGV"; over the timeout -> fail, "timed out"

A smoke script that needs a GPU (the default; a recipe declares ``[smoke] gpu = false``
otherwise) is preceded by a probe in the same interpreter that asks
``torch.cuda.is_available()``: without a visible device the result is ``skipped: no GPU`` —
never pass. A script declared GPU-free (tetra-triangulation's CGAL Delaunay) just runs. The smoke is also
skipped when the device cannot run the wheel's device code. The rule (see ``fatbin.runs_on``):
every kernel group of every ``.so`` needs SASS for the device's major with a minor at or below
the device's (``a`` cubins: exactly the device), or PTX for an arch at or below the device.

>>> smoke_verdict(0, "ok\\n", "").status.value
'pass'
>>> smoke_verdict(77, "skipped: no GPU\\n", "").detail
'skipped: no GPU'
>>> smoke_verdict(-11, "", "").detail
'crashed with SIGSEGV'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cuforge.config.arches import Arch
from cuforge.verify._proc import describe_exit, last_error_line, run_python
from cuforge.verify.fatbin import FatbinContainer, runs_on
from cuforge.verify.importer import interpret
from cuforge.verify.report import CheckResult, CheckStatus
from cuforge.verify.requirements import unmet

SKIP_EXIT = 77
_PROBE_MARK = "cuforge-device:"
_PROBE = f"""
import json
print({'cuforge-import: torch'!r}, flush=True)
import torch
info = {{"available": bool(torch.cuda.is_available())}}
if info["available"]:
    info["name"] = torch.cuda.get_device_name(0)
    info["capability"] = list(torch.cuda.get_device_capability(0))
print({_PROBE_MARK!r} + json.dumps(info), flush=True)
"""


@dataclass(frozen=True)
class SmokeScript:
    """A smoke script and what it needs to run: a GPU (``gpu``), and PyPI packages it compares
    against (``requires``, e.g. scipy), pip-installed into the interpreter's env if missing."""

    path: Path
    gpu: bool = True
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Device:
    """The first visible CUDA device: its name and compute capability."""

    name: str
    arch: Arch


def probe_device(python: Path, paths: Sequence[Path] = (), *,
                 timeout: float = 120, env: Mapping[str, str] | None = None) -> Device | None | CheckResult:
    """Ask ``python``'s torch for the first CUDA device: a Device, None when no device is
    visible, or a failed CheckResult when torch itself does not import or crashes."""
    outcome = run_python(python, ["-c", _PROBE], paths=paths, timeout=timeout, env=env)
    line = next((ln for ln in outcome.stdout.splitlines() if ln.startswith(_PROBE_MARK)), None)
    if line is None or outcome.returncode != 0:
        failed = interpret(outcome, timeout=timeout, check="smoke")
        if failed.status is CheckStatus.PASS:
            failed = CheckResult("smoke", "fail", "the GPU probe printed nothing")
        return CheckResult("smoke", "fail", f"cannot probe the GPU: {failed.detail}")
    info = json.loads(line.removeprefix(_PROBE_MARK))
    if not info["available"]:
        return None
    major, minor = info["capability"]
    return Device(info["name"], Arch(major, minor))


def skip_if_uncovered(device: Device, fatbins: Mapping[str, list[FatbinContainer]]
                      ) -> CheckResult | None:
    """A ``skipped`` result when some kernel group cannot run on ``device``, else None.

    >>> skip_if_uncovered(Device("H200", Arch(9, 0)), {}) is None
    True
    """
    missing = [f"{so} group #{c.index + 1} (SASS {' '.join(f'sm_{a.number}' for a in c.sass) or '-'}, "
               f"PTX {' '.join(f'compute_{a.number}' for a in c.ptx) or '-'})"
               for so, containers in fatbins.items() for c in containers
               if not c.is_link_stub and runs_on(c, device.arch) is None]
    if not missing:
        return None
    return CheckResult("smoke", "skipped",
                       f"skipped: {device.name} (sm_{device.arch.number}) is not covered by the "
                       f"wheel's fatbin: " + "; ".join(missing))


def smoke_verdict(returncode: int | None, stdout: str, stderr: str, *,
                  timeout: float = 0) -> CheckResult:
    """Apply the exit-code protocol (``None`` = killed on timeout)."""
    if returncode is None:
        return CheckResult("smoke", "fail", f"timed out after {timeout:g} s")
    if returncode == 0:
        # scripts end with "pass: <what was checked>"; say "passed" once, not "passed: pass:"
        last = last_error_line(stdout).removeprefix("pass:").strip()
        return CheckResult("smoke", "pass", f"passed{': ' + last if last else ''}")
    if returncode == SKIP_EXIT:
        reason = last_error_line(stdout) or last_error_line(stderr) or "no reason given"
        return CheckResult("smoke", "skipped", reason if reason.startswith("skipped") else f"skipped: {reason}")
    if returncode < 0:
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        return CheckResult("smoke", "fail", "\n".join(filter(None, [describe_exit(returncode), tail])))
    last = last_error_line(stderr) or last_error_line(stdout)
    return CheckResult("smoke", "fail", f"{describe_exit(returncode)}: {last}\n{stderr.strip()[-2000:]}".rstrip())


# Run a smoke script as __main__ with its own directory LAST on sys.path: `python smoke/spconv.py`
# would put smoke/ first, and `import spconv` would import the script itself (seen on the H200).
# Shared helpers next to the scripts (_knn_check.py) stay importable. PYTHONSAFEPATH (3.11+)
# keeps every child the script starts (`python <script> --child`, pointgroup_ops) from putting
# the script's directory first again; the scripts' names (check_<pkg>.py) shadow nothing either.
_LAUNCHER = ("import os, runpy, sys; script = sys.argv[1]; sys.argv = sys.argv[1:]; "
             "sys.path.append(os.path.dirname(script)); runpy.run_path(script, run_name='__main__')")


def run_smoke(python: Path, script: Path, paths: Sequence[Path] = (), *,
              timeout: float = 300, args: Sequence[str] = (),
              env: Mapping[str, str] | None = None) -> CheckResult:
    """Run ``script`` with ``python`` (no GPU probe; ``args`` after the script's path) and
    apply the protocol."""
    if not script.is_file():
        return CheckResult("smoke", "fail", f"smoke script {script} not found")
    outcome = run_python(python, ["-c", _LAUNCHER, str(script.resolve()), *args], paths=paths,
                         timeout=timeout, env={**(env or {}), "PYTHONSAFEPATH": "1"})
    return smoke_verdict(outcome.returncode, outcome.stdout, outcome.stderr, timeout=timeout)


def install_requirements(python: Path, requires: Sequence[str], paths: Sequence[Path] = (), *,
                         timeout: float = 600, env: Mapping[str, str] | None = None) -> str:
    """pip-install the smoke script's ``requires`` that ``python`` lacks; returns a note for
    the result ("" when nothing was missing). A failed install (no network on the GPU box) is
    only noted: the script decides whether it can run without them."""
    missing = unmet(python, list(requires), paths, env=env)
    if not missing:
        return ""
    pip = run_python(python, ["-m", "pip", "install", "--disable-pip-version-check", "-q",
                              *missing], timeout=timeout, env=env)
    if pip.returncode == 0:
        return f"installed for the smoke test: {' '.join(missing)}"
    why = last_error_line(pip.stderr) or describe_exit(pip.returncode or -9)
    return f"could not install {' '.join(missing)} for the smoke test: {why}"


def _noted(result: CheckResult, suffix: str, note: str) -> CheckResult:
    """``result`` with ``suffix`` on its summary line (unless the script said it already) and
    ``note`` as an extra detail line.

    >>> _noted(CheckResult("smoke", "pass", "passed: ok on H200 (sm_90)"), " on H200 (sm_90)", "").detail
    'passed: ok on H200 (sm_90)'
    """
    head, _, rest = result.detail.partition("\n")
    if suffix.strip() and suffix.strip() in head:   # a script that names its device itself
        suffix = ""
    return CheckResult(result.check, result.status,
                       "\n".join(filter(None, [head + suffix, note, rest])))


def check_smoke(python: Path, script: SmokeScript | Path, paths: Sequence[Path] = (), *,
                fatbins: Mapping[str, list[FatbinContainer]] | None = None,
                timeout: float = 300, env: Mapping[str, str] | None = None,
                no_device: str = "") -> CheckResult:
    """Probe the GPU, skip a device the fatbin does not cover, then run the smoke script.
    ``env``: what ``python`` needs on top of this process's environment (emulation's variables).

    No device visible -> ``skipped: no GPU``; device not covered -> skipped with the groups.
    ``no_device`` (why none can be visible, e.g. under QEMU) skips without the probe: an
    emulated ``import torch`` costs ~40 s, and under load it outran the probe's timeout.
    A script declared ``gpu=False`` skips both and runs at once.
    """
    smoke = script if isinstance(script, SmokeScript) else SmokeScript(Path(script))
    if not smoke.gpu:
        note = install_requirements(python, smoke.requires, paths, env=env)
        result = run_smoke(python, smoke.path, paths, timeout=timeout, env=env)
        return _noted(result, " (declared GPU-free: run without a device probe)", note)
    if no_device:
        return CheckResult("smoke", "skipped", f"skipped: no GPU: {no_device}; the smoke "
                           "script did not run")
    device = probe_device(python, paths, timeout=min(timeout, 120), env=env)
    if isinstance(device, CheckResult):
        return device
    if device is None:
        return CheckResult("smoke", "skipped", "skipped: no GPU\ntorch.cuda.is_available() is False in "
                           f"{python}; the smoke script did not run")
    uncovered = skip_if_uncovered(device, fatbins or {})
    if uncovered is not None:
        return uncovered
    note = install_requirements(python, smoke.requires, paths, env=env)
    result = run_smoke(python, smoke.path, paths, timeout=timeout, env=env)
    return _noted(result, f" on {device.name} (sm_{device.arch.number})", note)
