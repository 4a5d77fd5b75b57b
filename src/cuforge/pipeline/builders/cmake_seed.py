"""CMake's compiler detection, kept beside the compiler cache and put back into a fresh build dir.

With every object a cache hit, a CMake package rebuilt in a wiped build dir still pays for
CMake's detection of the C, C++ and CUDA compilers: 1.8 of the demo's 3.5 s here. CMake skips
that detection in an existing build dir, where ``CMakeFiles/<version>/CMake<LANG>Compiler.cmake``
and ``CMakeSystem.cmake`` exist and the cache says ``CMAKE_PLATFORM_INFO_INITIALIZED``. So after a
build, cuforge keeps those files and the cache entries that detection wrote (the tools' paths,
``CMAKE_EXECUTABLE_FORMAT``, ``CMAKE_UNAME``); into a build dir without ``CMakeCache.txt`` it
writes them back, and CMake configures as it would on a rerun. The ``build.ninja`` it writes is
the one CMake writes when it configures an existing build dir again (checked by hand on the
demo with CMake 4.4; tested in ``tests/integration/test_cmake_seed.py``).

Detection depends on the compilers, the flags and the tools on PATH, so the seed's key is the
whole build command (its arguments hold the CMake definitions, its environment what cuforge
sets), the detection variables of the environment it runs in, and the size and time of the
compiler and cmake binaries it finds: another compiler, flag or CMake gets its own seed. Seeds
live beside the package's compiler-cache store (not in it: sccache evicts what it finds
there), and only builds with a cache use them.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from cuforge.pipeline.fingerprint import key_of

# What CMake's compiler detection reads from the environment
DETECTION_VARIABLES = ("PATH", "CC", "CXX", "CUDACXX", "CUDAHOSTCXX", "CUDAARCHS", "CFLAGS",
                       "CXXFLAGS", "CUDAFLAGS", "LDFLAGS", "CMAKE_GENERATOR",
                       "CMAKE_TOOLCHAIN_FILE", "CUDA_PATH", "CUDA_HOME")
PLATFORM_FILES = re.compile(r"CMake(System|[A-Z]+Compiler)\.cmake")
# Cache entries that detection writes: tools (CMAKE_AR, CMAKE_CXX_COMPILER, ...), and two facts
CACHE_ENTRY = re.compile(r"^(CMAKE_[A-Z_]+:FILEPATH=.*|CMAKE_EXECUTABLE_FORMAT:INTERNAL=.*|"
                         r"CMAKE_UNAME:INTERNAL=.*)$")
INITIALIZED = "CMAKE_PLATFORM_INFO_INITIALIZED:INTERNAL=1"


def seed_key(argv: tuple[str, ...], env: dict[str, str]) -> str:
    """The detection inputs of ``argv`` run with ``env`` on top of this process's."""
    full = {**os.environ, **env}
    inputs = {name: full.get(name, "") for name in DETECTION_VARIABLES}
    inputs["command"] = key_of({"argv": list(argv), "env": sorted(env.items())})
    for name, program in (("cc", full.get("CC") or "cc"), ("cxx", full.get("CXX") or "c++"),
                          ("nvcc", full.get("CUDACXX") or "nvcc"), ("cmake", "cmake")):
        inputs[f"stat:{name}"] = _identity(program, full.get("PATH", ""))
    return key_of(inputs)


def _identity(program: str, path: str) -> str:
    found = shutil.which(program.split()[0] if program else "", path=path)
    if not found:
        return "missing"
    real = Path(found).resolve()
    stat = real.stat()
    return f"{real}:{stat.st_size}:{stat.st_mtime_ns}"


def restore(build_dir: Path, seed: Path) -> bool:
    """Seed a build dir that has no CMake cache; False when there is nothing to do."""
    if (build_dir / "CMakeCache.txt").exists() or not (seed / "CMakeCache.txt").is_file():
        return False
    for version_dir in (seed / "CMakeFiles").iterdir():
        target = build_dir / "CMakeFiles" / version_dir.name
        target.mkdir(parents=True, exist_ok=True)
        for item in version_dir.iterdir():
            shutil.copy2(item, target / item.name)
    shutil.copy2(seed / "CMakeCache.txt", build_dir / "CMakeCache.txt")
    return True


def remember(build_dir: Path, seed: Path) -> bool:
    """Keep a finished build dir's detection as ``seed`` (once: the first build's stays)."""
    cache = build_dir / "CMakeCache.txt"
    if seed.exists() or not cache.is_file():
        return False
    entries = [line for line in cache.read_text().splitlines() if CACHE_ENTRY.match(line)]
    version_dirs = [d for d in (build_dir / "CMakeFiles").glob("[0-9]*") if d.is_dir()]
    if not entries or not version_dirs:
        return False
    staging = seed.with_name(f"{seed.name}.{os.getpid()}")
    for version_dir in version_dirs:
        target = staging / "CMakeFiles" / version_dir.name
        target.mkdir(parents=True, exist_ok=True)
        for item in version_dir.iterdir():
            if item.is_file() and PLATFORM_FILES.fullmatch(item.name):
                shutil.copy2(item, target / item.name)
    (staging / "CMakeCache.txt").write_text("\n".join([*entries, INITIALIZED]) + "\n")
    try:
        staging.replace(seed)      # another build may have kept one first: theirs stays
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return True
