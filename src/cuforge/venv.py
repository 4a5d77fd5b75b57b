"""One environment per combo: a uv venv at ``.cuforge/envs/<combo>`` created once and reused,
or an existing interpreter that already has torch (a user's env, the GPU machine)."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from filelock import FileLock

from . import emulation, faults, hostcxx, platforms
from .combos import Combo
from .errors import ToolchainError
from .runner import Step, run
from .toolchain import Toolkit, assemble_pypi_toolkit, find_system_toolkit
from .torchinfo import TorchInfo, probe, probe_venv

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
    if combo.toolkit == "pypi":
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


def creation_steps(state_dir: Path, combo: Combo, base_python: str) -> list[Step]:
    """The uv commands that create (or update) a combo's venv; shown as-is by --dry-run."""
    root = env_dir(state_dir, combo)
    uv = find_uv()
    py = str(root / "bin" / "python")
    reqs = [*requirements(combo), *BUILD_TOOLS]
    index = index_args(combo)
    return [
        Step((uv, "venv", "--seed", "--allow-existing", "--python", base_python, str(root)),
             description=f"create the {combo.id} venv"),
        Step((uv, "pip", "install", "--python", py, *index, *reqs),
             description=f"install torch {combo.torch}, the CUDA {combo.accel.cuda} toolkit and "
                         "build tools"),
    ]


def prepare(state_dir: Path, combo: Combo, *, log: Path, verbose: bool = False,
            emulator: emulation.Emulator | None = None) -> ComboEnv:
    """Create or reuse the combo's environment and return it ready to build in. With an
    ``emulator`` (a foreign-platform combo with ``emulate``: cuforge.emulation.for_combo) the
    venv's Python is the target's, run by QEMU; this process's environment is set for it."""
    platforms.require_native(combo.target, f"combo {combo.id}", emulate=combo.emulate)
    if combo.interpreter:
        return _existing_interpreter(state_dir, combo)
    if emulator is None and combo.emulate and combo.target.machine != platforms.host().machine:
        raise ToolchainError(f"combo {combo.id} is emulated, but no emulator was given")
    if emulator is not None:
        emulation.activate(state_dir, emulator)
        base_python = emulator.python(state_dir, combo.python)
    root = env_dir(state_dir, combo)
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        reused = is_ready(state_dir, combo)
        if not reused:
            _discard_half_created(root)
            python = base_python if emulator is not None else find_python(combo.python)
            for step in creation_steps(state_dir, combo, str(python)):
                run(step, log=log, stream=verbose, error=ToolchainError)
                faults.point("env")
        info = probe_venv(root)
        _check_torch(info, combo)
        toolkit = _toolkit(combo, info, root / "cuda")
        if emulator is not None:
            _native_tools(emulator, info, toolkit, root / "native-tools", log=log,
                          verbose=verbose)
        if not reused:
            (root / STAMP).write_text(json.dumps(env_spec(combo), indent=1))
    return ComboEnv(combo, info, toolkit, root, reused)


def _native_tools(emulator: emulation.Emulator, info: TorchInfo, toolkit: Toolkit, dest: Path,
                  *, log: Path, verbose: bool) -> None:
    """Replace the toolkit's compilers by this machine's build of the same wheels (the
    emulator's ``native_tools``): device code does not depend on the host they run on."""
    steps = emulation.native_tools_steps(emulator, info.site_packages, dest, find_uv())
    stamp = dest / ".cuforge-native-tools"
    want = json.dumps([s.argv for s in steps])
    if not (stamp.is_file() and stamp.read_text() == want):
        shutil.rmtree(dest, ignore_errors=True)
        for step in steps:
            run(step, log=log, stream=verbose, error=ToolchainError)
        stamp.write_text(want)
    emulation.overlay_native_tools(emulator, dest, toolkit.root)


def which(interpreter: str) -> str:
    """A combo's ``interpreter`` (``python3`` or a path) as a path."""
    return shutil.which(interpreter) or interpreter


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


def check_interpreter(combo: Combo) -> TorchInfo:
    """A combo's existing interpreter, probed: it must exist, be the combo's Python (the wheels
    are tagged with it) and import a torch built for the combo's CUDA; ToolchainError with
    the fix otherwise. What a build does first, and what doctor reports."""
    python = which(combo.interpreter)
    if not Path(python).exists():
        raise ToolchainError(f"the combo's interpreter {combo.interpreter!r} does not exist",
                             hint="fix `interpreter` in envs/combos.toml or --interpreter")
    info = probe(Path(python))
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


def _existing_interpreter(state_dir: Path, combo: Combo) -> ComboEnv:
    info = check_interpreter(combo)
    python = info.python
    if info.torch != combo.torch:   # the interpreter decides; the wheelhouse path follows it
        print(f"note: {python} has torch {info.torch}; building for that, not {combo.torch}",
              file=sys.stderr)
    _check_torch(info, combo, exact_torch=False)
    slot = hashlib.sha1(str(info.python).encode()).hexdigest()[:8]
    toolkit = _toolkit(combo, info, state_dir / "toolkits" / slot)
    return ComboEnv(combo, info, toolkit, None, True)


def _toolkit(combo: Combo, info: TorchInfo, dest: Path) -> Toolkit:
    if combo.toolkit == "system":
        toolkit = find_system_toolkit(combo.accel.cuda)
    else:
        toolkit = assemble_pypi_toolkit(info.site_packages, dest, info.machine)
    # Before anything compiles: a host compiler that links libstdc++ statically is replaced
    # (or refused with the fix) here, once per build.
    host, note = hostcxx.choose(combo.host_cxx, combo.host_cc, combo.host_fallbacks)
    if note:
        print(f"note: {note}", file=sys.stderr)
    return replace(toolkit, host=host)


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


def find_uv() -> str:
    try:
        from uv import find_uv_bin
        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    if found := shutil.which("uv"):
        return found
    raise ToolchainError("uv is not installed", hint="pip install uv (or `pip install -e .`)")


def find_python(version: str) -> Path:
    """Python ``version`` from PATH, pyenv, or uv's managed Pythons, in that order."""
    found = shutil.which(f"python{version}")
    if found and "/shims/" not in found:   # pyenv shims fail for versions not selected
        return Path(found)
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for candidate in sorted(glob.glob(str(pyenv_root / "versions" / f"{version}.*" / "bin" /
                                          f"python{version}")), reverse=True):
        return Path(candidate)
    try:
        import subprocess
        out = subprocess.run([find_uv(), "python", "find", version], capture_output=True,
                             text=True)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    except ToolchainError:
        pass
    raise ToolchainError(f"Python {version} not found (not on PATH as python{version}, not in "
                         f"pyenv, not managed by uv)",
                         hint=f"install it: `uv python install {version}` or "
                         f"`pyenv install {version}`")
