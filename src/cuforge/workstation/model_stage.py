"""Setup's last step, in the user's venv with the stack's variables: every wheel imported
together, then the checkout's own model code on the GPU (skipped without one, saying so)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.text import Text

from cuforge.core.errors import ConfigError
from cuforge.discovery.entry import missing_module
from cuforge.verify._proc import run_python
from cuforge.verify.report import CheckResult, verdict_line
from cuforge.core.project import Project
from cuforge.workstation.decision import Setup, checkout_requirements, installable

ENTRY_TIMEOUT = 180   # seconds for one `SCRIPT --help`: imports only, but torch's among them


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """The stack's variables for the checks' subprocesses (what activation sets)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def stack_modules(p: Setup) -> list[str]:
    """What the import stage imports: each recipe's ``modules`` (else its wheel's own)."""
    from cuforge.verify.wheel import default_modules, unpack
    names: list[str] = []
    for r, wheel in installable(p)[0]:
        if r.modules:
            names += r.modules
            continue
        with tempfile.TemporaryDirectory() as tmp:
            names += default_modules(unpack(wheel, Path(tmp)))
    return list(dict.fromkeys(names))


_STAGE = """{load_module}
import json
print({mark!r}, "torch", flush=True)
import torch
for name in {modules!r}:
    print({mark!r}, name, flush=True)
    load_module(name)
print({mark!r}, "done", flush=True)
gpu = torch.cuda.is_available()
print("CUFORGE-GPU", json.dumps(torch.cuda.get_device_name(0) if gpu else None), flush=True)
"""


def model_stage(project: Project, python: Path, p: Setup, out: Console, *,
                checkout: Path) -> bool:
    """In the venv, with the stack's variables: import torch and every wheel's modules in one
    process (and ask it for a GPU), the stack's entry scripts with ``--help``, then, when there
    is a GPU, the stack's ``checkout_model`` script on ``checkout`` (the user's own model code:
    PTv3, MILo's renderer)."""

    from cuforge.verify import check_host
    from cuforge.verify.importer import LOAD_MODULE, MARK, interpret
    from cuforge.verify.report import CheckStatus
    from cuforge.verify.smoke import run_smoke
    modules = stack_modules(p)
    runs_with = dict(p.target.step_env())   # what the venv's Python needs (emulation)
    # one interpreter with torch for both runs (each a child of it): the import stage's and
    # the checkout model's torch import were seconds of every setup
    with _environ({v.name: v.value for v in p.stack.env}), \
            check_host.serving(python, runs_with, enabled=not p.target.emulated):
        outcome = run_python(python, ["-c", _STAGE.format(load_module=LOAD_MODULE, mark=MARK,
                                                         modules=modules)], env=runs_with)
        imported = interpret(outcome, timeout=300)
        results = {"import": imported if imported.failed else
                   CheckResult("import", "pass", f"torch + {len(modules)} modules together")}
        gpu = next((json.loads(ln.split(" ", 1)[1]) for ln in outcome.stdout.splitlines()
                    if ln.startswith("CUFORGE-GPU ")), None)
        if p.stack.entry_scripts and not imported.failed:
            results["entry points"] = entry_points(python, p, checkout, runs_with)
        if not p.stack.checkout_model or imported.failed:
            pass
        elif gpu is None:
            results["checkout model"] = CheckResult(
                "checkout model", "skipped", f"skipped: no GPU (torch.cuda.is_available() is "
                f"False in {python}); run `cuforge setup {p.stack.name}` again on the GPU machine")
        else:
            ran = run_smoke(python, project.root / p.stack.checkout_model, [],
                            args=[str(checkout.resolve())], timeout=900, env=runs_with)
            results["checkout model"] = CheckResult("checkout model", ran.status,
                                                    f"{ran.detail} on {gpu}")
    out.print(verdict_line(f"model stage ({p.stack.name})", results.values(), reason_width=200))
    failed = [r for r in results.values() if r.failed]
    for r in failed:
        out.print(Text(r.detail, style="red"))
    ran = results.get("checkout model")
    if ran is not None and ran.status is CheckStatus.PASS:     # what it compared, with the numbers
        out.print(Text(f"checkout model: {ran.detail}"))
    return not failed


def entry_points(python: Path, p: Setup, checkout: Path, env: dict[str, str]) -> CheckResult:
    """Each of the stack's entry scripts run as ``python SCRIPT --help`` in ``checkout``; a
    failure names the import that failed and what should have provided it."""
    loaded, failures = [], []
    for script in p.stack.entry_scripts:
        ran = run_python(python, [script, "--help"], cwd=checkout, env=env, timeout=ENTRY_TIMEOUT)
        if ran.timed_out:
            failures.append(f"{script} --help: no answer in {ENTRY_TIMEOUT} s")
        elif ran.returncode == 0:
            loaded.append(script)
        else:
            failures.append(f"{script} --help: {_why_not(ran.stderr, p, checkout)}")
    if failures:
        return CheckResult("entry points", "fail", "\n".join(failures))
    return CheckResult("entry points", "pass", f"{', '.join(loaded)} load (--help)")


def _why_not(stderr: str, p: Setup, checkout: Path) -> str:
    """The failed import and what is behind it: one of the stack's wheels, a requirement
    line, or nothing the checkout declares; else the error's last line."""
    module = missing_module(stderr)
    if not module:
        lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else "failed with no message"
    for recipe in p.recipes:
        if module in {m.split(".")[0] for m in recipe.modules}:
            return (f"`import {module}` failed: the extension {recipe.name} "
                    f"({recipe.source.checkout or recipe.source.describe()}) is not importable")
    try:
        declared = checkout_requirements(p.stack, checkout)
    except ConfigError:
        declared = []
    for req in declared:
        if req.name.replace("-", "_") == module.lower().replace("-", "_"):
            return f"`import {module}` failed: {req.source} `{req.spec}` did not install"
    return (f"`import {module}` failed: neither the checkout's requirements nor its "
            f"extensions provide {module} (add it to the checkout's requirements, or "
            "`pip install` it in the venv)")
