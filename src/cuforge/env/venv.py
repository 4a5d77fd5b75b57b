"""One environment per combo: a uv venv at ``.cuforge/envs/<combo>`` created once and reused,
or an existing interpreter that already has torch (a user's env, the GPU machine)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from filelock import FileLock

from cuforge.env import cccl, emulation, hostcxx
from cuforge.core import faults

from cuforge.config.combos import Combo, ToolkitSource
from cuforge.core.console import timed
from cuforge.core.errors import EnvError, ToolchainError
from cuforge.env.programs import find_uv
from cuforge.core.runner import Step, run
from cuforge.env.toolchain import (Toolkit, assemble_pypi_toolkit, find_system_toolkit,
                                   pypi_toolkit_at)
from cuforge.env.torchinfo import TorchInfo, expected, probe_interpreter, probe_venv

from cuforge.env.target import Target

# What every combo env carries besides torch and the toolkit: the build front-ends.
BUILD_TOOLS = ("pip", "setuptools>=70", "wheel", "ninja", "cmake>=3.28",
               "scikit-build-core>=0.10", "pybind11>=2.13", "numpy")
STAMP = "cuforge-env.json"


@dataclass(frozen=True)
class ComboEnv:
    """A ready environment: its interpreter, torch facts and toolkit."""

    combo: Combo
    info: TorchInfo
    toolkit: Toolkit
    root: Path | None        # the venv directory, None for an existing interpreter
    reused: bool
    target: Target           # where its code runs (cuforge.env.target): decided before it was made

    @property
    def python(self) -> Path:
        return self.info.python

    @property
    def bin_dir(self) -> Path:
        return self.python.parent


def env_spec(combo: Combo) -> dict:
    """Everything that decides an env's contents; a change means the env is updated."""
    return {
        "python": combo.python, "torch": combo.torch, "accel": combo.accel.tag,
        "toolkit": combo.toolkit, "toolkit_wheels": list(combo.accel.toolkit_wheels),
        "torch_index": combo.torch_index, "find_links": combo.find_links,
        "build_tools": list(BUILD_TOOLS), "emulate": combo.emulate,
    }


def env_dir(state_dir: Path, combo: Combo) -> Path:
    return state_dir / "envs" / combo.env_id


def is_ready(state_dir: Path, combo: Combo) -> bool:
    stamp = env_dir(state_dir, combo) / STAMP
    return stamp.is_file() and json.loads(stamp.read_text()) == env_spec(combo)


def requirements(combo: Combo) -> list[str]:
    """torch and (for a PyPI toolkit) the CUDA toolkit wheels: what makes a combo a combo."""
    reqs = [f"torch=={combo.torch}"]
    if combo.toolkit is ToolkitSource.PYPI:
        reqs += combo.accel.toolkit_wheels
    return reqs


def index_args(combo: Combo) -> list[str]:
    """uv options that point at the combo's torch index (then PyPI) and its find-links."""
    index: list[str] = []
    if combo.torch_index:
        index += ["--index-url", combo.torch_index, "--extra-index-url", "https://pypi.org/simple",
                  "--index-strategy", "unsafe-best-match"]
    if combo.find_links:
        index += ["--find-links", combo.find_links]
    return index


def creation_steps(state_dir: Path, combo: Combo, target: Target) -> list[Step]:
    """The uv commands that create (or update) a combo's venv; shown as-is by --dry-run."""
    root = env_dir(state_dir, combo)
    env = target.step_env()   # uv runs the venv's Python: under emulation, the target's
    uv = find_uv()
    py = str(root / "bin" / "python")
    reqs = [*requirements(combo), *BUILD_TOOLS]
    index = index_args(combo)
    return [
        Step((uv, "venv", "--seed", "--allow-existing", "--python", target.base_python,
              str(root)), env, description=f"create the {combo.id} venv"),
        Step((uv, "pip", "install", "--python", py, *index, *reqs), env,
             description=f"install torch {combo.torch}, the CUDA {combo.accel.cuda} toolkit and "
                         "build tools"),
    ]


def prepare(state_dir: Path, combo: Combo, target: Target, *, log: Path,
            verbose: bool = False, compiles: bool = True,
            interpreter: TorchInfo | None = None) -> ComboEnv:
    """Create or reuse the combo's environment and return it ready to build in, for
    ``target`` (``cuforge.env.target.resolve``: under emulation the venv's Python is the
    target's, run by QEMU). ``compiles`` false (verify): the CCCL overlay, which only a
    compile reads, is named but not installed. ``interpreter``: an interpreter combo's
    interpreter as the caller probed it already (``check_interpreter``), not asked again."""
    if combo.interpreter:
        return _existing_interpreter(state_dir, combo, target, overlay=compiles,
                                     info=interpreter)
    target.require_usable()
    root = env_dir(state_dir, combo)
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        reused = is_ready(state_dir, combo)
        if not reused:
            _discard_half_created(root)
            target.python()   # raises when that Python is not here, saying how to get it
            _create(creation_steps(state_dir, combo, target), combo, root, log=log,
                    verbose=verbose)
        info = probe_venv(root, env=target.step_env())
        _check_torch(info, combo)
        if not reused:
            _note_unpredicted(info, combo)
        toolkit = _toolkit(combo, info, root / "cuda", target, state_dir=state_dir,
                           overlay=compiles)
        if target.emulator is not None:   # its compilers: this machine's build (emulation.toml)
            emulation.install_native_tools(target.emulator, info.site_packages, toolkit.root,
                                           root / "native-tools", log=log, verbose=verbose)
        if not reused:
            (root / STAMP).write_text(json.dumps(env_spec(combo), indent=1))
    return ComboEnv(combo, info, toolkit, root, reused, target)


def _create(steps: list[Step], combo: Combo, root: Path, *, log: Path, verbose: bool) -> None:
    """Run the creation steps, saying what runs: a first env takes ~20 s (uv hard-links torch
    from its cache) to minutes (a download), and silence that long reads as a hang."""
    now = {"step": ""}
    with timed(lambda: now["step"], terminal=not verbose,   # -v streams uv's own lines
               start=f"creating the {combo.id} env (torch {combo.torch}, once): {root}",
               done=f"created the {combo.id} env"):
        for step in steps:
            now["step"] = step.description
            run(step, log=log, stream=verbose, error=EnvError)
            faults.point("env")


def inspect(state_dir: Path, combo: Combo, target: Target) -> ComboEnv | None:
    """The env as ``prepare`` would return it, read without creating, assembling or caching
    anything (``--dry-run``); None when the venv does not exist yet."""
    if combo.interpreter:
        return _existing_interpreter(state_dir, combo, target, assemble=False)
    if not is_ready(state_dir, combo):
        return None
    root = env_dir(state_dir, combo)
    info = probe_venv(root, env=target.step_env(), remember=False)
    _check_torch(info, combo)
    toolkit = _toolkit(combo, info, root / "cuda", target, assemble=False, state_dir=state_dir)
    return ComboEnv(combo, info, toolkit, root, True, target)


def predicted(state_dir: Path, combo: Combo, target: Target) -> ComboEnv:
    """The env ``creation_steps`` will make, before it exists (``--dry-run``): its paths, and
    torch's facts as the combo names them (``torch_libs``: where its CUDA wheels put their
    headers and libraries, per accelerator in envs/accels.toml)."""
    root = env_dir(state_dir, combo)
    cuda = combo.accel.cuda
    info = expected(root, combo.python, combo.torch, combo.accel.tag,
                    f"{cuda.major}.{cuda.minor}", target.machine, combo.accel.torch_libs)
    toolkit = _toolkit(combo, info, root / "cuda", target, assemble=False, state_dir=state_dir)
    return ComboEnv(combo, info, toolkit, root, False, target)


def _note_unpredicted(info: TorchInfo, combo: Combo) -> None:
    """Say so when torch's CUDA wheels made other ``nvidia/`` dirs than envs/accels.toml's
    ``torch_libs``: a dry run before the env existed showed other include and library dirs
    (and so other keys) than the build uses."""
    made = [d.parent.name for d in info.nvidia_lib]
    headers = [d.parent.name for d in info.nvidia_include]
    if made != list(combo.accel.torch_libs) or headers != made:
        print(f"note: torch's CUDA wheels made site-packages/nvidia/{{{','.join(made)}}}, but "
              f"envs/accels.toml [{combo.accel.tag}] torch_libs = {list(combo.accel.torch_libs)}"
              ": a dry run before this env existed predicted other include dirs; set "
              f"torch_libs = {made}", file=sys.stderr)


def _discard_half_created(root: Path) -> None:
    """The stamp is written last, so a venv without one was interrupted while being created or
    updated: start it afresh (uv hard-links from its cache, so this costs seconds)."""
    stamp = root / STAMP
    if stamp.exists():
        stamp.unlink()   # a spec change: update in place; the stamp returns when it is done
    elif root.exists():
        print(f"note: {root} was left half-created (interrupted); creating it again",
              file=sys.stderr)
        shutil.rmtree(root)


def check_interpreter(combo: Combo, target: Target, *, remember: bool = True) -> TorchInfo:
    """A combo's existing interpreter, probed: it must exist, be the combo's Python (the wheels
    are tagged with it) and import a torch built for the combo's CUDA; ToolchainError with
    the fix otherwise. What a build does first, and what doctor reports. Its answer is kept
    under the state dir (``remember``; a dry run writes nothing)."""
    python = target.base_python
    if not Path(python).exists():
        raise ToolchainError(f"the combo's interpreter {combo.interpreter!r} does not exist",
                             hint="fix `interpreter` in envs/combos.toml or --interpreter")
    info = probe_interpreter(Path(python), target.state_dir / "probes", env=target.step_env(),
                             remember=remember)
    if not info.has_torch:
        raise ToolchainError(f"{python} cannot import torch ({info.torch_error})",
                             hint="install torch into that interpreter, or drop `interpreter` "
                             "so cuforge creates a venv")
    if info.py_version != combo.python:
        raise ToolchainError(f"{python} is Python {info.py_version}, but combo {combo.id} is "
                             f"for Python {combo.python}",
                             hint=f"point `interpreter` (or --interpreter) at a Python "
                             f"{combo.python} with torch, or pass --python {info.py_version}")
    _check_torch(info, combo, exact_torch=False)
    return info


def with_interpreter(combo: Combo, info: TorchInfo) -> Combo:
    """An ``interpreter = ...`` combo as its interpreter (``check_interpreter``) decides it:
    its torch, whatever the combo says (and so the wheelhouse path). The one place that
    sets it: a build's env and setup's decision both come here."""
    if info.torch != combo.torch:
        print(f"note: {info.python} has torch {info.torch}; building for that, not "
              f"{combo.torch}", file=sys.stderr)
    return replace(combo, torch=info.torch)


def _existing_interpreter(state_dir: Path, combo: Combo, target: Target, *,
                          assemble: bool = True, overlay: bool = True,
                          info: TorchInfo | None = None) -> ComboEnv:
    """The combo's own interpreter as an env (``info``: probed already, else asked now)."""
    info = info or check_interpreter(combo, target, remember=assemble)
    combo = with_interpreter(combo, info)
    slot = hashlib.sha1(str(info.python).encode()).hexdigest()[:8]
    toolkit = _toolkit(combo, info, state_dir / "toolkits" / slot, target, assemble=assemble,
                       state_dir=state_dir, overlay=overlay)
    return ComboEnv(combo, info, toolkit, None, True, target)


def _toolkit(combo: Combo, info: TorchInfo, dest: Path, target: Target, *,
             assemble: bool = True, state_dir: Path, overlay: bool = True) -> Toolkit:
    """The env's toolkit; without ``assemble``, where it is (or will be) and its version, with
    nothing written (``--dry-run``). The accel's CCCL overlay (env/cccl.py) comes first on its
    include path; the CCCL version a compile then sees (torch's nvidia headers after the
    toolkit's) is decided here, once per env."""
    run_env = dict(target.step_env())   # the env's own nvcc is the target's program
    if target.toolkit is ToolkitSource.SYSTEM:
        toolkit = find_system_toolkit(combo.accel.cuda)
    elif assemble:
        toolkit = assemble_pypi_toolkit(info.site_packages, dest, target.platform.cuda_target,
                                        env=run_env)
    else:
        toolkit = pypi_toolkit_at(dest, combo.accel.cuda, env=run_env)
    # Before anything compiles: a host compiler that links libstdc++ statically is replaced
    # (or refused with the fix) here, once per build.
    host_compiler, note = hostcxx.choose(combo.host_cxx, combo.host_cc, combo.host_fallbacks,
                                         search=dict(target.step_env()).get("PATH"))
    if note:
        print(f"note: {note}", file=sys.stderr)
    spec = cccl.overlay_spec(combo.accel.cccl_overlay)
    if spec:
        inc = (cccl.ensure_overlay(state_dir, spec, info.python) if assemble and overlay else
               cccl.overlay_include(cccl.overlay_dir(state_dir, spec)))
        toolkit = replace(toolkit, include_dirs=(inc, *toolkit.include_dirs))
    return replace(toolkit, host_compiler=host_compiler,
                   cccl=cccl.version_in([*toolkit.include_dirs, *info.nvidia_include]))


def _check_torch(info: TorchInfo, combo: Combo, *, exact_torch: bool = True) -> None:
    if not info.has_torch:
        raise ToolchainError(f"torch is not importable in {info.python}: {info.torch_error}")
    if exact_torch and info.torch != combo.torch:
        raise ToolchainError(f"{info.python} has torch {info.torch}, the combo wants {combo.torch}")
    want = combo.accel.cuda
    if info.cuda != f"{want.major}.{want.minor}":
        raise ToolchainError(
            f"torch {info.torch_full} in {info.python} is built for CUDA {info.cuda or 'none (CPU)'}"
            f", but the combo is {combo.accel.tag} (CUDA {want})",
            hint=f"set torch_index for {combo.accel.tag} in envs/accels.toml or envs/combos.toml to "
            "an index that has the matching CUDA build, then delete the env to recreate it")
