"""A package's own setup.py / pyproject, built against the combo's torch (no isolation).

The build's Python gets cuforge's shim (``shim/sitecustomize.py``) on PYTHONPATH: a package
with several extensions compiles them side by side, each in its own build dir.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
from pathlib import Path

from cuforge.core.runner import Step
from cuforge.pipeline.builders import pep517

SHIM = Path(__file__).resolve().parent / "shim"
SEEDS_DETECTION = False   # a setup.py's own CMake (if any) is its business


def torch_defines(info) -> tuple[tuple[str, str], ...]:
    return ()   # setup.py imports torch itself


def steps(job) -> list[Step]:
    # every compiler line goes to the package's log; the console sees it with -v
    argv = pep517.command(job)
    theirs = dict(job.env).get("PYTHONPATH") or os.environ.get("PYTHONPATH")
    path = os.pathsep.join(p for p in (str(SHIM), theirs) if p)
    env = {**dict(job.env), "PYTHONPATH": path}
    launchers, scripts = launcher_env(job, env)
    env.update(launchers)
    return [Step(tuple(argv), tuple(sorted(env.items())),
                 description=f"build {job.recipe.name} (setuptools)",
                 scripts=(*scripts, *job.scripts()))]


def launcher_env(job, env: dict[str, str]
                 ) -> tuple[dict[str, str], tuple[tuple[Path, str], ...]]:
    """The job's launchers (a compile slot, the path maps, sccache) in front of torch's two
    compilers: ``PYTORCH_NVCC`` for nvcc, and ``CXX`` as a launcher script (torch's ninja rules
    quote CXX as one word). ``CC`` stays: torch passes it to nvcc as ``-ccbin``, which would put
    a launcher inside nvcc's own steps. Torch's own wrapping (>= 2.14, whatever ccache is on
    PATH) is always off: no cache, or ours. Also returns the CXX script to write (path, text)."""
    out = {"TORCH_NO_COMPILER_WRAPPER": "1"}
    if job.cache is not None:
        out.update(dict(job.cache.env))
    prefix = job.launchers("CXX")
    if not prefix:
        return out, ()
    out["PYTORCH_NVCC"] = shlex.join([*job.launchers("CUDA"), env.get("CUDACXX", "nvcc")])
    script = cxx_launcher_script(prefix, job.launcher_dir(),
                                 env.get("CXX") or os.environ.get("CXX", ""))
    out["CXX"] = str(script[0])
    return out, (script,)


def cxx_launcher_script(prefix: list[str], where: Path, cxx: str) -> tuple[Path, str]:
    """``<where>/<hash>/<name of the real C++ compiler>``: a script that runs ``cxx`` (the
    combo's host compiler) behind ``prefix`` (a slot, sccache). Named like the compiler, so
    torch's compiler check sees the same name as without it."""
    words = shlex.split(cxx) or ["c++"]
    while len(words) > 1 and Path(words[0]).name in ("ccache", "sccache"):
        words = words[1:]   # a launcher already in the user's CXX: ours replaces it
    real = shutil.which(words[0]) or words[0]
    command = shlex.join([*prefix, real, *words[1:]])
    key = hashlib.sha256(command.encode()).hexdigest()[:12]
    text = f'#!/bin/sh\n# cuforge: the C++ compiler behind its launchers\nexec {command} "$@"\n'
    return where / key / Path(real).name, text
