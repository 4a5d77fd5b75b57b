"""A CMake project (ours in native/, or upstream's) built into a wheel by scikit-build-core.

Arches reach CMake as ``CMAKE_CUDA_ARCHITECTURES``; the build directory persists, so a rerun
after an interruption only recompiles what is missing.
"""

from __future__ import annotations

from cuforge.core.runner import Step
from cuforge.pipeline.builders import pep517

LANGUAGES = ("C", "CXX", "CUDA")
SEEDS_DETECTION = True   # CMake's compiler detection, kept beside the compiler cache


def torch_defines(info) -> tuple[tuple[str, str], ...]:
    """What native/cmake/CuforgeTorch.cmake would otherwise ask the interpreter (one more
    ``import torch`` per configure): the env check has already probed it."""
    if not info.has_torch or info.torch_lib is None:
        return ()
    return (("CUFORGE_TORCH_INCLUDE_DIRS", ";".join(map(str, info.include_paths))),
            ("CUFORGE_TORCH_LIBRARY_DIR", str(info.torch_lib)),
            ("CUFORGE_TORCH_CXX11_ABI", "1" if info.cxx11_abi else "0"),
            ("CUFORGE_TORCH_VERSION", info.torch_full or info.torch))


def steps(job) -> list[Step]:
    settings = {
        "build-dir": str(job.build_dir),
        "cmake.define.CMAKE_CUDA_ARCHITECTURES": job.archs.cmake(),
        "cmake.build-type": "Release",
        "cmake.define.CUFORGE_CMAKE_DIR": str(job.cmake_dir),
        # linked with the installed RPATH: the install step would blank the build RPATH (the
        # env's torch/lib) in place, and its length would stay in .dynstr (reproducible.py)
        "cmake.define.CMAKE_BUILD_WITH_INSTALL_RPATH": "ON",
    }
    # Always defined (empty without launchers): the persistent build dir's CMakeCache.txt must
    # not keep a launcher from an earlier build. A CMake list: slot, path maps, sccache.
    settings.update({f"cmake.define.CMAKE_{lang}_COMPILER_LAUNCHER": ";".join(job.launchers(lang))
                     for lang in LANGUAGES})
    settings.update({f"cmake.define.{k}": v for k, v in job.defines})
    # verbose always: the full compiler output belongs in the package's log
    settings["build.verbose"] = "true"
    argv = pep517.command(job, settings)
    env = {**dict(job.env), **launcher_env(job)}
    return [Step(tuple(argv), tuple(sorted(env.items())),
                 description=f"build {job.recipe.name} (cmake)", scripts=job.scripts())]


def launcher_env(job) -> dict[str, str]:
    """The server's settings, and the launchers as CMake's environment default too, for CMake
    projects configured by a package's own setup.py."""
    out = dict(job.cache.env) if job.cache else {}
    out.update({f"CMAKE_{lang}_COMPILER_LAUNCHER": ";".join(job.launchers(lang))
                for lang in LANGUAGES if job.launchers(lang)})
    return out
