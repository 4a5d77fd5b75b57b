"""Where a combo's code runs, decided once per command: the target and build platforms, the
emulator (or none), the Python a venv is made from, where its toolkit comes from (and whose
build of the toolkit wheels it gets), the CUDA target folder, the sysroot, uv's platform name,
and what emulation adds to every command's environment. Machine facts come from
``data/platforms.toml`` (cuforge.config.platforms) through this object: no other module asks the
machine what it is (a test greps for it).

``resolve`` is the one place that asks "native or emulated?". Everything after it (venv,
toolchain, the plan and its dry run, verify, shell, doctor, setup) reads the ``Target``; the
emulation variables reach each command through that command's own environment (a plan step's
``env``, so they are part of its key), never through ``os.environ``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from cuforge.env import emulation, emulation_setup
from cuforge.config import platforms
from cuforge.config.combos import Combo, ToolkitSource
from cuforge.core.errors import ToolchainError
from cuforge.config.platforms import Platform
from cuforge.core.project import Project
from cuforge.core.errors import ConfigError
from cuforge.env.programs import native_python


@dataclass(frozen=True)
class Target:
    combo: str                         # the combo's id, for messages
    platform: Platform                 # what the wheels run on
    build_platform: Platform           # this machine (cuforge runs and builds here)
    # None: the target's code runs natively here (not compared: its table holds dicts, and
    # platform, env and bin_dirs already tell two targets apart)
    emulator: emulation.Emulator | None = field(compare=False)
    base_python: str                   # what a venv is made from (emulated: the target root's)
    env: tuple[tuple[str, str], ...]   # emulation's variables (the loader's root, nvcc's flags)
    bin_dirs: tuple[Path, ...]         # first on PATH: the sysroot compiler wrappers
    state_dir: Path
    # no such Python here: raised when a venv is to be made from it (a dry run shows the name)
    missing_python: ToolchainError | None = field(default=None, compare=False)
    toolkit: ToolkitSource = ToolkitSource.PYPI   # nvcc from the env's wheels, or the system's

    @property
    def emulated(self) -> bool:
        return self.emulator is not None

    @property
    def sysroot(self) -> Path | None:
        """The target's userland as the cross compilers see it (its headers, its libc), or
        None natively."""
        return self.emulator.root_dir(self.state_dir) if self.emulator else None

    @property
    def no_device(self) -> str:
        """Why no GPU can be visible to the target's Python here ("" natively): QEMU user mode
        runs the aarch64 torch, but no aarch64 driver reaches a device."""
        return (f"{self.platform.name} code runs under QEMU here, which reaches no GPU"
                if self.emulator else "")

    @property
    def cuda_target(self) -> str:
        """The toolkit's ``targets/<name>`` folder for the wheels' machine (``sbsa-linux``)."""
        return self.platform.cuda_target

    @property
    def uv_platform(self) -> str:
        """uv's ``--python-platform`` name of the target (``aarch64-manylinux_2_28``)."""
        return self.platform.uv_platform

    @property
    def machine(self) -> str:
        """Whose build of the toolkit wheels the env gets (``aarch64`` under emulation too)."""
        return self.platform.machine

    def python(self) -> str:
        """The base Python, or the error that says how to get it."""
        if self.missing_python is not None:
            raise self.missing_python
        return self.base_python

    def step_env(self) -> tuple[tuple[str, str], ...]:
        """What a command gets on top of the user's environment to run the target's code (a
        step that sets its own PATH puts ``bin_dirs`` there itself)."""
        if not self.bin_dirs:
            return self.env
        path = os.pathsep.join([*map(str, self.bin_dirs), os.environ.get("PATH", "")])
        return (*self.env, ("PATH", path))

    def environ(self) -> dict[str, str]:
        """This process's environment plus ``step_env``, for interpreter runs outside a plan
        step (the env probe, verification)."""
        return {**os.environ, **dict(self.step_env())}

    def require_usable(self) -> None:
        """Refuse, with the fix, when the emulator cannot run the target's code; natively, a
        no-op."""
        if self.emulator is None:
            return
        bad = [f for f in emulation_setup.check(self.state_dir, self.emulator) if not f.ok]
        if bad:
            raise ToolchainError(f"{self.emulator.platform} emulation is not usable here: "
                                 f"{bad[0].what}", hint=bad[0].fix)


def resolve(project: Project, combo: Combo) -> Target:
    """The decision for ``combo`` on this machine. Raises ConfigError for another machine's
    combo unless emulation was asked for (``--emulate``, ``emulate = true``)."""
    build_platform = platforms.build_platform()
    require_native(combo, build_platform)
    foreign = combo.target_platform.machine != build_platform.machine
    emu = (emulation.for_platform(project, combo.target_platform.name)
           if combo.emulate and foreign else None)
    env: tuple[tuple[str, str], ...] = ()
    bin_dirs: tuple[Path, ...] = ()
    missing = None
    if emu is not None:
        base = str(emu.python(project.state_dir, combo.python))
        env = tuple(emu.variables(project.state_dir).items())
        bin_dirs = (emu.wrappers(project.state_dir),)
    else:
        try:
            base = native_python(combo.interpreter, combo.python)
        except ToolchainError as err:
            base, missing = f"python{combo.python}", err
    return Target(combo.id, combo.target_platform, build_platform, emu, base, env, bin_dirs,
                  project.state_dir, missing, combo.toolkit)


def require_native(combo: Combo, build_platform: Platform) -> None:
    """Refuse another machine's combo unless emulation was asked for: torch, the toolkit wheels
    and the import check must run where they build, which on another machine means under QEMU
    (``--emulate`` or a combo's ``emulate = true``, cuforge.env.emulation)."""
    platform = combo.target_platform
    # build_platform: this machine, or a test's
    if platform.machine == build_platform.machine or combo.emulate:
        return
    raise ConfigError(
        f"combo {combo.id} targets {platform.name}, but this machine is {build_platform.name}: "
        f"{platform.machine} wheels are built on {platform.machine}, or here under emulation "
        "only when asked: by default cuforge does not cross-compile",
        hint=f"pass --emulate (QEMU user mode; for {platform.name} from here the combo "
             "spark-emulated, Python 3.11; `cuforge doctor` says whether emulation works, "
             "docs/dgx-spark.md), or run the same command on a "
             f"{platform.name} machine (the DGX Spark itself or an arm64 CI runner, see "
             "`invoke ci-matrix`); `cuforge resolve` checks that the combo's torch and "
             "toolkit install there")
