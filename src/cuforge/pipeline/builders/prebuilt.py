"""A published wheel, downloaded as-is (pure-Python packages, or prebuilts that pass checks),
then checked against the sha256 pins of the recipe before anything uses it."""

from __future__ import annotations

import sys

from cuforge.core.runner import Step

SEEDS_DETECTION = False


def torch_defines(info) -> tuple[tuple[str, str], ...]:
    return ()   # nothing is configured


def steps(job) -> list[Step]:
    argv = [str(job.python), "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
            "--disable-pip-version-check", "-d", str(job.out_dir)]
    if job.recipe.prebuilt_find_links:
        argv += ["--find-links", job.recipe.prebuilt_find_links]
    argv += list(job.recipe.prebuilt)
    return [Step(tuple(argv), job.env, description=f"download {job.recipe.name} (prebuilt)"),
            Step((sys.executable, "-m", "cuforge.publish.pins", str(job.out_dir),
                  *job.recipe.prebuilt_sha256),
                 description=f"refuse a {job.recipe.name} wheel whose sha256 is not pinned")]
