"""A published wheel, downloaded as-is (pure-Python packages, or prebuilts that pass checks)."""

from __future__ import annotations

from ..runner import Step


def steps(job) -> list[Step]:
    argv = [str(job.python), "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
            "--disable-pip-version-check", "-d", str(job.out_dir)]
    if job.recipe.prebuilt_find_links:
        argv += ["--find-links", job.recipe.prebuilt_find_links]
    argv += list(job.recipe.prebuilt)
    return [Step(tuple(argv), job.env, description=f"download {job.recipe.name} (prebuilt)")]
