"""cuforge's build-time shim, put on PYTHONPATH for setuptools builds only.

torch's BuildExtension compiles a package's extensions one after another, each through one
ninja run whose build.ninja lives in ``build_temp``; setuptools' own ``parallel`` option would
run them at once but in the same ``build_temp``, so the ninja files overwrite each other. Here
each extension gets its own ``build_temp/<extension name>`` (its own build.ninja and ninja
log, so an interrupted build resumes per extension) and up to ``MAX_JOBS`` extensions compile
at once, each ninja with its share of ``MAX_JOBS`` (never more jobs in all).

Some packages turn torch's ninja path off (torch-scatter and torch-cluster pass
``use_ninja=False``). torch then compiles every file of every extension one after another, and
calls nvcc by path, so ``PYTORCH_NVCC`` (the compiler cache) is not used: torch-scatter took
959 s on a 16-core H200 that way. The same compile commands run through ninja when it is
installed, so the shim turns it back on.

``CUFORGE_SERIAL_EXTENSIONS=1`` turns it off. Nothing happens unless setuptools' build_ext
module is imported, so every other Python process pays nothing.

pccm's code generation (spconv, cumm) is done once per build dir while its inputs stay the
same: cuforge_pccm.py, next to this file, patched in when ``pccm.builder`` is imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

# setuptools' vendored distutils, under either name (its distutils hack aliases the package)
TARGETS = ("setuptools._distutils.command.build_ext", "distutils.command.build_ext")


def _parallel_build(self) -> None:
    """build_ext's serial loop, run side by side in per-extension build dirs."""
    import copy
    from concurrent.futures import ThreadPoolExecutor

    exts = list(self.extensions)
    jobs = max(1, int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1))
    workers = min(jobs, len(exts))
    if workers < 2 or not getattr(self, "use_ninja", False):
        return self._cuforge_serial()   # one extension, or not torch's ninja path: as before
    os.environ["MAX_JOBS"] = str(max(1, jobs // workers))   # read by torch for each ninja run
    print(f"cuforge: {len(exts)} extensions, {workers} at once, "
          f"{os.environ['MAX_JOBS']} ninja jobs each", flush=True)

    def one(ext) -> None:
        cmd = copy.copy(self)
        cmd.build_temp = os.path.join(self.build_temp, ext.name)
        with cmd._filter_build_errors(ext):
            cmd.build_extension(ext)

    with ThreadPoolExecutor(workers) as pool:
        for fut in [pool.submit(one, ext) for ext in exts]:
            fut.result()          # the first failure is raised, as in the serial loop


def _run_with_ninja(self) -> None:
    """build_ext.run, with torch's ninja path back on where setup.py turned it off."""
    if getattr(self, "use_ninja", None) is False and _torch_finds_ninja():
        self.use_ninja = True
        self.force = True     # what torch's finalize_options sets for ninja: ninja decides
        print("cuforge: setup.py turned ninja off (use_ninja=False); building with ninja so "
              "files compile side by side and through the compiler cache", flush=True)
    return self._cuforge_run()


def _torch_finds_ninja() -> bool:
    from torch.utils.cpp_extension import is_ninja_available
    return is_ninja_available()


def _patch(module) -> None:
    cls = module.build_ext
    if not hasattr(cls, "_cuforge_serial"):
        cls._cuforge_serial = cls._build_extensions_serial
        cls._build_extensions_serial = _parallel_build
        cls._cuforge_run = cls.run
        cls.run = _run_with_ninja


def _patch_pccm(module) -> None:
    import cuforge_pccm   # this shim's own module, next to this file
    cuforge_pccm.patch(module)


class _Hook(importlib.abc.MetaPathFinder):
    """Patches build_ext (and pccm's builder) right after it is imported."""

    def __init__(self, patches: dict) -> None:
        self.patches = patches   # module name -> its patch

    def find_spec(self, name, path, target=None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module) -> None:
            run(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec


def _chain_to_the_real_sitecustomize() -> None:
    """A sitecustomize further down sys.path (a distribution's own) still runs."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec and spec.loader and spec.origin != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_PATCHES = {"pccm.builder": _patch_pccm}
if os.environ.get("CUFORGE_SERIAL_EXTENSIONS") != "1":
    _PATCHES.update(dict.fromkeys(TARGETS, _patch))
sys.meta_path.insert(0, _Hook(_PATCHES))
_chain_to_the_real_sitecustomize()
