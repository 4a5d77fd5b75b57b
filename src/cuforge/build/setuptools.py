"""A package's own setup.py / pyproject, built against the combo's torch (no isolation).

The build's Python gets cuforge's shim (``shim/sitecustomize.py``) on PYTHONPATH: a package
with several extensions compiles them side by side, each in its own build dir.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..runner import Step

SHIM = Path(__file__).resolve().parent / "shim"


def steps(job) -> list[Step]:
    # -v always: every compiler line goes to the package's log; the console sees it with -v.
    argv = [str(job.python), "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps",
            "--disable-pip-version-check", "-w", str(job.out_dir), *job.recipe.pip_args,
            str(job.src_dir)]
    theirs = dict(job.env).get("PYTHONPATH") or os.environ.get("PYTHONPATH")
    path = os.pathsep.join(p for p in (str(SHIM), theirs) if p)
    env = tuple(sorted({**dict(job.env), "PYTHONPATH": path}.items()))
    return [Step(tuple(argv), env, description=f"build {job.recipe.name} (setuptools)")]
