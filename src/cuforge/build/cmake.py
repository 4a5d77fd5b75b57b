"""A CMake project (ours in native/, or upstream's) built into a wheel by scikit-build-core.

Arches reach CMake as ``CMAKE_CUDA_ARCHITECTURES``; the build directory persists, so a rerun
after an interruption only recompiles what is missing.
"""

from __future__ import annotations

from ..runner import Step


def steps(job) -> list[Step]:
    settings = {
        "build-dir": str(job.build_dir),
        "cmake.define.CMAKE_CUDA_ARCHITECTURES": job.archs.cmake(),
        "cmake.build-type": "Release",
        "cmake.define.CUFORGE_CMAKE_DIR": str(job.cmake_dir),
    }
    settings.update({f"cmake.define.{k}": v for k, v in job.defines})
    # verbose always: the full compiler output belongs in the package's log
    settings["build.verbose"] = "true"
    argv = [str(job.python), "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps",
            "--disable-pip-version-check", "-w", str(job.out_dir)]
    argv += [f"--config-settings={k}={v}" for k, v in settings.items()]
    argv += [*job.recipe.pip_args, str(job.src_dir)]
    return [Step(tuple(argv), job.env, description=f"build {job.recipe.name} (cmake)")]
