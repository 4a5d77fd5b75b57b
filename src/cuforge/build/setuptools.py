"""A package's own setup.py / pyproject, built against the combo's torch (no isolation)."""

from __future__ import annotations

from ..runner import Step


def steps(job) -> list[Step]:
    # -v always: every compiler line goes to the package's log; the console sees it with -v.
    argv = [str(job.python), "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps",
            "--disable-pip-version-check", "-w", str(job.out_dir), *job.recipe.pip_args,
            str(job.src_dir)]
    return [Step(tuple(argv), job.env, description=f"build {job.recipe.name} (setuptools)")]
